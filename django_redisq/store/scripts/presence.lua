-- presence: one worker at a time (the holder of a short lease) reads which
-- connection proves each registered worker of the queue alive, so that it
-- can ask the server which of those connections are gone (store/steps/presence.py).
-- One poller per queue keeps the cost of fast recovery linear in the fleet:
-- every worker polling every worker would be quadratic. The lease is renewed
-- by each poll of its holder; another worker takes it over once it lapses
-- (its holder stopped or died).
--
-- KEYS[1] -> P:presence (HASH, worker id -> '<server run_id>:<client id>')
-- KEYS[2] -> P:reaper   (STRING, the polling worker's id, with the lease's expiry)
-- ARGV[1] -> the calling worker's id
-- ARGV[2] -> lease in ms
--
-- Returns: {1, worker id, presence, ...} when the caller holds the lease (at most the
--   workers that heartbeat the queue), else {0, ms until the lease lapses}
--! include shape.lua
local bad = wrong_shape({'hash', 'string'})
if bad then return bad end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  return {0, math.max(redis.call('PTTL', KEYS[2]), 1)}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local out = {1}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
