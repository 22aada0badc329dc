-- job_enqueue — insert one job unless its id names a row or a live row holds its namespace.
--
-- KEYS[1..5] job:state, job:data, job:live, due:<queue>, wake   (includes/enqueue.lua)
-- KEYS[6..11] the accounting keys (includes/account.lua): the new row is listed and counted
-- ARGV[1..8] id, namespace, state row, data row, due score, wake slot, queue, wake channel
--   (includes/enqueue.lua)
-- Returns 1 when inserted; 2 when inserted due without a PUBLISH, its wake slot's having gone
-- out already (the driver publishes once more at the slot's end); else the id of the row it
-- dedupes to (ARGV[1] itself when the id exists, live or finished; the live holder's id when
-- the namespace is taken).
--!include row.lua
--!include account.lua
--!include enqueue.lua

local got = enqueue()
if ENQUEUE_QUIET then
  return 2
end
return got
