-- topic_claim: hand a subscription's entries pending longer than min idle (their consumer died
-- between enqueue and XACK, or the enqueue failed) to this consumer, one XAUTOCLAIM window from
-- a cursor; the caller follows the cursor over the whole pending list. With each entry comes its
-- delivery count (XPENDING over the window's id range, this consumer's entries; room for entries it
-- holds in flight between them), so one that keeps failing to become a task is dead-lettered, never
-- retried forever.
--
-- KEYS[1] -> T:stream  (STREAM)
-- KEYS[2] -> T:gen     (HASH subscription -> generation)
-- ARGV[1] -> group, ARGV[2] -> consumer, ARGV[3] -> min idle (ms), ARGV[4] -> cursor ('0-0' first),
-- ARGV[5] -> window size (entries)
--
-- Returns: {generation, next cursor ('0-0': the pending list is walked), trimmed, id_1, payload_1,
--   trace_1, deliveries_1, ...}; trimmed: pending entries gone from the stream (the hard cap trimmed them),
--   acknowledged here; payload: field p ('' if none); trace: field tc, the publisher's trace context
--   ('' if none); {-1} when the group does not exist
local r = redis.pcall('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], 'COUNT', tonumber(ARGV[5]))
if type(r) == 'table' and r.err then
  if string.find(r.err, 'NOGROUP', 1, true) then return {-1} end
  return redis.error_reply(r.err)  -- e.g. WRONGTYPE: raised, not taken for a missing group
end
local gen = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') or 0
local trimmed = 0
if r[3] then trimmed = #r[3] end  -- Redis 7 lists (and drops) the deleted ones itself
local out = {gen, r[1], 0}
local first, last
for _, e in ipairs(r[2]) do
  if not e or not e[2] then  -- Redis 6.2: a deleted entry's fields are nil
    if e and e[1] then redis.call('XACK', KEYS[1], ARGV[1], e[1]) end
    trimmed = trimmed + 1
  else
    local payload, trace = '', ''
    for j = 1, #e[2], 2 do
      if e[2][j] == 'p' then payload = e[2][j + 1] elseif e[2][j] == 'tc' then trace = e[2][j + 1] end
    end
    out[#out + 1] = e[1]
    out[#out + 1] = payload
    out[#out + 1] = trace
    out[#out + 1] = 1
    first = first or e[1]
    last = e[1]
  end
end
out[3] = trimmed
if first then
  local counts = {}
  for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], first, last, 4 * tonumber(ARGV[5]), ARGV[2])) do
    counts[p[1]] = p[4]
  end
  for i = 4, #out, 4 do
    out[i + 3] = counts[out[i]] or 1
  end
end
return out
