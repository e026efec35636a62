-- topic_publish: append one event to a topic's stream (events.publish), first making sure
-- the given subscriptions' consumer groups exist, so a "latest" group created now starts
-- just before this event and receives it.
--
-- KEYS[1] -> T:stream  (STREAM; created by the first publish or group)
-- ARGV[1] -> the payload JSON (a JSON object, checked by the caller): the entry's field p
-- ARGV[2] -> the publisher's trace context (JSON object of W3C fields, tracing.py): the entry's
--            field tc; '' -> no such field (tracing off: nothing more is written)
-- ARGV[3] -> n: the consumer groups that follow, 2 ARGV each: group name, start id ('$' or '0')
--            (an existing group is left as it is)
--
-- Returns: the new entry's id ('<ms>-<seq>', Redis time)
for i = 0, tonumber(ARGV[3]) - 1 do
  redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[4 + 2 * i], ARGV[5 + 2 * i], 'MKSTREAM')  -- BUSYGROUP: it exists
end
if ARGV[2] ~= '' then
  return redis.call('XADD', KEYS[1], '*', 'p', ARGV[1], 'tc', ARGV[2])
end
return redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
