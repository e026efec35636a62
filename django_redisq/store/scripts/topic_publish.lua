-- topic_publish: append one event to a topic's stream (events.publish), first making sure
-- the given subscriptions' consumer groups exist, so a "latest" group created now starts
-- just before this event and receives it.
--
-- KEYS[1] -> T:stream  (STREAM; created by the first publish or group)
-- ARGV[1] -> the payload JSON (a JSON object, checked by the caller)
-- ARGV[2] -> n: the consumer groups that follow, 2 ARGV each: group name, start id ('$' or '0')
--            (an existing group is left as it is)
--
-- Returns: the new entry's id ('<ms>-<seq>', Redis time)
for i = 0, tonumber(ARGV[2]) - 1 do
  redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[3 + 2 * i], ARGV[4 + 2 * i], 'MKSTREAM')  -- BUSYGROUP: it exists
end
return redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
