-- includes/lease.lua — a lease key's holdings (inlined after row.lua, never run alone):
-- lease_take, lease_renew, lease_release, lease_abandon, lease_holders.
--
-- Keys (hash tag `{p}` shared with every other key; jobs_redis.keys.Keys):
--   {p}:hold:<key>    zset token by expires_at_ms: the lease key's holdings, live or not
--   {p}:holder:<key>  hash token -> holder NUL stamp ("1" a rate stamp, "0" a slot), and
--                     NUL holder -> token: a holder's own holding without a walk (no holder
--                     holds NUL, so no such field is a token's digits)
--   {p}:hold-token    string, the last token granted store-wide (INCR): a later grant of any
--                     key carries a greater token
--   {p}:hold-expiry   zset, every holding of every lease key by expires_at_ms, member
--                     <lease key> NUL <token, 19 digits>: equal scores order by key bytes, then
--                     token (what lease_purge reads; kept by every script that writes a holding)
--   {p}:hold-clock    zset, member <lease key>, scored by the key's clock: the latest now_ms
--                     any take, renewal, release or abandon of the key used (or the latest end
--                     lease_purge deleted of it). A call works on a key at the later of its
--                     now_ms and that clock (`lease_time`), which moves there: the key's time
--                     never runs back, so callers landing out of order, or on hosts whose
--                     clocks disagree, share one timeline. lease_purge drops a clock once its
--                     key holds nothing and it is far enough behind (includes nothing here).
-- The caller names each distinct lease key of a call by q, its 1-based place among them, and
-- hands its pair of keys as KEYS[2q - 1] (hold) and KEYS[2q] (holder): a lease key may hold any
-- bytes, so its keys are built in Python (but lease_purge's: it cannot know them before it
-- reads the index), never here. Each script sets `expiry_index` and `clock_index` to the
-- index's and the clocks' places in KEYS before it touches a holding.
--
-- A holding is live while expires_at_ms > its key's time (`lease_time`). The two keys of a lease key
-- and the index always agree, and a holder has at most one holding of a key (a take drops the
-- expired ones, then replaces the holder's own), so the NUL holder field always names that one.
-- Expired holdings stay until their key is next taken, the token is named to a release or an
-- abandon, or lease_purge deletes them: no PEXPIRE, since the server's clock is not the
-- callers' and could drop a holding a caller still counts live.

local expiry_index
local clock_index
local lease_of = {}
local time_of = {}

-- The index member of holding `token` (a string of digits) of lease key `key`.
local function expiry_member(key, token)
  return key .. Z .. string.rep("0", 19 - #token) .. token
end

-- The lease key (text) of q: its hold key without the tag and ":hold:".
local function lease_key(q)
  local key = lease_of[q]
  if key == nil then
    key = string.match(KEYS[2 * tonumber(q) - 1], "^%{[^{}]*%}:hold:(.*)$")
    lease_of[q] = key
  end
  return key
end

-- Delete holding `token` from a lease key's two keys (given by name).
local function drop_named(hold, holder, token)
  local row = redis.call("HGET", holder, token)
  if row then
    redis.call("HDEL", holder, token, Z .. string.sub(row, 1, #row - 2))
  end
  redis.call("ZREM", hold, token)
end

-- The time of this call on lease key q: the later of `now` and the key's clock, which moves
-- there. Read and moved once per key and call (later items of the key reuse it).
local function lease_time(q, now)
  local at = time_of[q]
  if at == nil then
    local key = lease_key(q)
    at = tonumber(now)
    local clock = redis.call("ZSCORE", clock_index, key)
    if clock and tonumber(clock) > at then
      at = tonumber(clock)
    end
    redis.call("ZADD", clock_index, fmt(at), key)
    time_of[q] = at
  end
  return at
end

local function hold_key(q)
  return KEYS[2 * tonumber(q) - 1]
end

local function holder_key(q)
  return KEYS[2 * tonumber(q)]
end

-- Whether the holding `token` (a string) of lease key q is live at `now`; nil when it is not
-- stored at all.
local function holding_live(q, token, now)
  local ends = redis.call("ZSCORE", hold_key(q), token)
  if not ends then
    return nil
  end
  return tonumber(ends) > tonumber(now)
end

-- Delete the holding `token` of lease key q from both keys and the index.
local function drop_holding(q, token)
  drop_named(hold_key(q), holder_key(q), token)
  redis.call("ZREM", expiry_index, expiry_member(lease_key(q), token))
end

-- Store holding `token`'s end `ends` in the index (a new one, or a renewal's).
local function index_holding(q, token, ends)
  redis.call("ZADD", expiry_index, ends, expiry_member(lease_key(q), token))
end

-- Whether the stored holding `token` of lease key q is a rate stamp.
local function is_stamp(q, token)
  local row = redis.call("HGET", holder_key(q), token)
  return row ~= false and string.sub(row, -1) == "1"
end
