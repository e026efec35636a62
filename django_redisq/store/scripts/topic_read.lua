-- topic_read: take new entries of a subscription's consumer group for one consumer, with the
-- subscription's generation read in the same atomic step, so a rewind (topic_rewind.lua) is
-- either wholly before this read (replayed entries get the new generation) or wholly after.
--
-- KEYS[1] -> T:stream  (STREAM)
-- KEYS[2] -> T:gen     (HASH subscription -> generation)
-- ARGV[1] -> group (the subscription's name), ARGV[2] -> consumer (the worker id),
-- ARGV[3] -> at most this many entries
--
-- Returns: {generation, top, id_1, payload_1, trace_1, ..., id_n, payload_n, trace_n}
--   top: the stream's newest id ('0-0' when empty), for a blocking XREAD that waits past it;
--   payload: the entry's field p ('' when the entry has none: a foreign producer's, dead-lettered);
--   trace: the entry's field tc, the publisher's trace context ('' when it has none);
--   {-1} when the group does not exist (NOGROUP)
local r = redis.pcall('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[3]), 'STREAMS', KEYS[1], '>')
if type(r) == 'table' and r.err then
  if string.find(r.err, 'NOGROUP', 1, true) then return {-1} end
  return redis.error_reply(r.err)  -- e.g. WRONGTYPE: raised, not taken for a missing group
end
local gen = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') or 0
local out = {gen, '0-0'}
if r and r[1] then
  for _, e in ipairs(r[1][2]) do
    local payload, trace = '', ''
    for j = 1, #e[2], 2 do
      if e[2][j] == 'p' then payload = e[2][j + 1] elseif e[2][j] == 'tc' then trace = e[2][j + 1] end
    end
    out[#out + 1] = e[1]
    out[#out + 1] = payload
    out[#out + 1] = trace
  end
end
if #out == 2 then
  local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if top[1] then out[2] = top[1][1] end
end
return out
