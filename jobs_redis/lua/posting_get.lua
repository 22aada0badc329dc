-- posting_get — the posting stored under (tenant, key).
--
-- KEYS[1] posting   (includes/posting.lua)
-- ARGV[1] tenant ("" for the cross-tenant ledger)   ARGV[2] key
-- Returns `job_id NUL posted_at_ms NUL lines_json`, or false.
--!include row.lua
--!include posting.lua

return redis.call("HGET", KEYS[1], posting_field(ARGV[1], ARGV[2]))
