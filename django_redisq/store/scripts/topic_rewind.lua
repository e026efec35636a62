-- topic_rewind: move a subscription back (or forward) to an entry id and bump its generation
-- in one step: every entry after the id is delivered again, and the generation in the task ids
-- (worker/pump.py) makes the replayed events new tasks, not duplicates of the first run.
--
-- KEYS[1] -> T:stream  (STREAM)
-- KEYS[2] -> T:gen     (HASH subscription -> generation)
-- KEYS[3] -> T:meta    (HASH: 'acked:<group>' set to the new id, so a group deleted before the
--                      next trim is recreated there, not past what the rewind delivers again)
-- ARGV[1] -> group, ARGV[2] -> the id the group has "last delivered" from now on ('0-0': everything)
--
-- Returns: the new generation; -1 when the group does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local r = redis.pcall('XGROUP', 'SETID', KEYS[1], ARGV[1], ARGV[2])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'NOGROUP', 1, true) then return -1 end
  return redis.error_reply(r.err)
end
redis.call('HSET', KEYS[3], 'acked:' .. ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
