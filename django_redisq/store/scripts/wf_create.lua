-- wf_create: store a new workflow's bookkeeping in its own slot, before its first steps are queued.
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
-- ARGV[1] -> total number of steps
-- ARGV[2] -> JSON list of the steps as written (task path, queue, parents): what reads show
-- ARGV[3] -> the on_error callback's spec (JSON), '' for none
-- ARGV[4] -> provisional TTL in ms: the keys expire unless wf_start.lua follows (an enqueuer that
--            died before queueing the first steps leaves nothing behind)
-- ARGV[5] -> k, then k pairs (step, spec JSON) of the steps the worker releases,
--            then k pairs (step, number of its parents),
--            then pairs (step, JSON list of the steps waiting for it) to the end
--
-- Returns: 1 -> created; 0 -> a workflow with this id exists (nothing written)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'running', 'total', ARGV[1], 'steps', ARGV[2], 'created_at', now)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'on_error', ARGV[3]) end
local k = tonumber(ARGV[5])
local i = 6
for _ = 1, k do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, k do
  redis.call('HSET', KEYS[6], ARGV[i] .. '#need', ARGV[i + 1])
  i = i + 2
end
while i < #ARGV do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = 1, 7 do redis.call('PEXPIRE', KEYS[j], ARGV[4]) end
return 1
