-- lib/topic_group.lua: create a subscription's consumer group when it is missing
-- (`--! include topic_group.lua`; used by topic_publish.lua and topic_groups.lua).
--
-- A group never seen before (no field in T:gen) starts at its start id ('$' latest, '0'
-- earliest) and is recorded in T:gen (generation 0). A group T:gen knows existed: an operator
-- deleted it (XGROUP DESTROY), or the stream was deleted. It is not started at '$' (that would
-- skip every event it had not turned into a task, silently) but where its subscription had
-- acknowledged everything before: T:meta 'acked:<group>', written by each trim
-- (topic_trim.lua) and by a rewind; '0' (every retained entry) when no trim recorded it. The
-- generation is kept, so an entry it had already turned into a task gets the same task id
-- and enqueue.lua drops the duplicate while that task's record lives (RESULT_TTL). Each such
-- recreation is counted: T:meta 'regrouped:<group>' and 'regrouped'.

-- ensure_group(stream, gen, meta, group, start): 0 if the group existed, 1 if it is new, else
-- the id it was recreated at (its "last delivered")
local function ensure_group(stream, gen, meta, group, start)
  local r = redis.pcall('XGROUP', 'CREATE', stream, group, start, 'MKSTREAM')
  if type(r) == 'table' and r.err then return 0 end  -- BUSYGROUP: it exists
  if redis.call('HSETNX', gen, group, 0) == 1 then return 1 end  -- a new subscription
  local at = redis.call('HGET', meta, 'acked:' .. group) or '0'
  redis.call('XGROUP', 'SETID', stream, group, at)
  redis.call('HINCRBY', meta, 'regrouped:' .. group, 1)
  redis.call('HINCRBY', meta, 'regrouped', 1)
  return at
end
