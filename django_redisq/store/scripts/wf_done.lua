-- wf_done: a step succeeded (run by its worker BEFORE the step's ack). Records it in the set
-- of done steps, keeps its result for the steps waiting for it, and returns EVERY waiting step
-- whose parents are all done and which is not itself done, not only the ones this call
-- completed: a crash between this script and the queueing of those steps repeats the release
-- when the step is redelivered (the queueing is idempotent by the steps' task ids).
-- A replayed step that had failed the workflow un-fails it here once no failed step is left.
-- Cost: O(the step's edges), plus the fan-in of a step it releases (its inputs).
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
-- ARGV[1] -> the step (its index)
-- ARGV[2] -> its result (JSON)
-- ARGV[3] -> TTL in ms of the keys once the workflow has succeeded (RESULT_TTL)
--
-- Returns: {status, child, spec JSON, inputs JSON list, child, ...}:
--   status 'gone' (no such workflow: expired or never created), 'cancelled' (nothing released),
--   'running', 'resumed' (running again: this call un-failed it), 'failed' (another step is
--   still dead), 'succeeded', or 'ended' (this call completed the workflow: said once;
--   'ended_resumed' when it un-failed it too)
local meta, spec, deps, done, res, gate, failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local step, result = ARGV[1], ARGV[2]
local status = redis.call('HGET', meta, 'status')
if not status then return {'gone'} end
redis.call('SADD', done, step)
local resumed = false
local kids = {}
local listed = redis.call('HGET', deps, step)
if listed then
  kids = cjson.decode(listed)
  redis.call('HSET', res, step, result)
end
if redis.call('SREM', failed, step) == 1 and status == 'failed' and redis.call('SCARD', failed) == 0 then
  status = 'running'  -- the failed step was replayed and succeeded: the workflow carries on
  resumed = true
  redis.call('HSET', meta, 'status', status)
  redis.call('HDEL', meta, 'failed_step', 'error', 'finished_at')
  for j = 1, 7 do redis.call('PERSIST', KEYS[j]) end
end
if status == 'cancelled' then return {status} end
local out = {status}
for _, kid in ipairs(kids) do
  local k = tostring(kid)
  if redis.call('HSETNX', gate, k .. '|' .. step, 1) == 1 then redis.call('HINCRBY', gate, k .. '#', 1) end
  local have = tonumber(redis.call('HGET', gate, k .. '#') or '0')
  local need = tonumber(redis.call('HGET', gate, k .. '#need') or '0')
  if have >= need and redis.call('SISMEMBER', done, k) == 0 then
    local s = redis.call('HGET', spec, k) or '{}'
    local sp = cjson.decode(s)
    local inputs = {}
    if sp.mode == 'one' or sp.mode == 'list' then
      for i, p in ipairs(sp.p) do inputs[i] = redis.call('HGET', res, tostring(p)) or 'null' end
    end
    out[#out + 1] = k
    out[#out + 1] = s
    out[#out + 1] = '[' .. table.concat(inputs, ',') .. ']'
  end
end
if status == 'running' and redis.call('SCARD', done) >= tonumber(redis.call('HGET', meta, 'total') or '0') then
  local t = redis.call('TIME')
  redis.call('HSET', meta, 'status', 'succeeded', 'finished_at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  for j = 1, 7 do redis.call('PEXPIRE', KEYS[j], ARGV[3]) end
  out[1] = 'ended'
  if resumed then out[1] = 'ended_resumed' end
else
  if resumed then out[1] = 'resumed' end
  local ttl = redis.call('PTTL', meta)  -- a failed (or not yet started) workflow's keys expire together,
  if ttl > 0 then                       -- those this call created too
    for j = 2, 7 do redis.call('PEXPIRE', KEYS[j], ttl) end
  end
end
return out
