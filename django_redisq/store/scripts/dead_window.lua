-- dead_window (read-only): a window of one dead-letter set by rank within a
-- snapshot, with scores, for the k-way merge of a partitioned queue's dead
-- letters (store/reads/dead_scan.py). Ranks are as in scan_dead.lua: 0 is the newest
-- entry that died at or before the snapshot score. O(log n + window).
--
-- KEYS[1] -> P:dead  (ZSET, id -> died at in Redis ms)
-- ARGV[1] -> snapshot  highest score included
-- ARGV[2] -> first rank of the window
-- ARGV[3] -> last rank of the window (inclusive)
--
-- Returns: {entries in snapshot, id1, score1, id2, score2, ...} (newest first)
local top = ARGV[1]
local base = redis.call('ZCOUNT', KEYS[1], '(' .. top, '+inf')
local total = redis.call('ZCOUNT', KEYS[1], '-inf', top)
local lo, hi = tonumber(ARGV[2]), math.min(tonumber(ARGV[3]), total - 1)
local reply = {total}
if lo < 0 then lo = 0 end
if hi >= lo then
  local got = redis.call('ZREVRANGE', KEYS[1], base + lo, base + hi, 'WITHSCORES')
  for i = 1, #got do reply[#reply + 1] = got[i] end
end
return reply
