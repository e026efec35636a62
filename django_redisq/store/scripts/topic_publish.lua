-- topic_publish: append one event to a topic's stream (events.publish), first making sure
-- the given subscriptions' consumer groups exist, so a "latest" group created now starts
-- just before this event and receives it; a group that existed and was deleted is recreated
-- where its subscription stood, and counted (lib/topic_group.lua), never at this event.
--
-- KEYS[1] -> T:stream  (STREAM; created by the first publish or group)
-- KEYS[2] -> T:gen     (HASH subscription -> generation; 0 for a group made here)
-- KEYS[3] -> T:meta    (HASH: 'acked:<group>' read; 'regrouped:<group>', 'regrouped' incremented)
-- KEYS[4] -> T:waiters (HASH, durable tasks waiting for an event: wait_register.lua): counted only
-- ARGV[1] -> the payload JSON (a JSON object, checked by the caller): the entry's field p
-- ARGV[2] -> the publisher's trace context (JSON object of W3C fields, core/tracing.py): the entry's
--            field tc; '' -> no field (tracing off: nothing more is written)
-- ARGV[3] -> n: the consumer groups that follow, 2 ARGV each: group name, start id ('$' or '0')
--            (an existing group is left as it is)
--
-- Returns: {the new entry's id ('<ms>-<seq>', Redis time), waiters (HLEN of KEYS[4]: the caller
--   matches them only when there are any), group_1, at_1, ...}: then each recreated group with the
--   id it was recreated at
--! include topic_group.lua
local out = {'', 0}
for i = 0, tonumber(ARGV[3]) - 1 do
  local got = ensure_group(KEYS[1], KEYS[2], KEYS[3], ARGV[4 + 2 * i], ARGV[5 + 2 * i])
  if type(got) == 'string' then
    out[#out + 1] = ARGV[4 + 2 * i]
    out[#out + 1] = got
  end
end
if ARGV[2] ~= '' then
  out[1] = redis.call('XADD', KEYS[1], '*', 'p', ARGV[1], 'tc', ARGV[2])
else
  out[1] = redis.call('XADD', KEYS[1], '*', 'p', ARGV[1])
end
if redis.call('TYPE', KEYS[4])['ok'] == 'hash' then out[2] = redis.call('HLEN', KEYS[4]) end
return out
