-- wf_start: the first steps are queued: a running workflow's keys no longer expire
-- (wf_create.lua gave them a provisional TTL; wf_done/wf_fail/wf_cancel set the final one).
--
-- KEYS[1..7] -> W:meta, W:spec, W:deps, W:done, W:res, W:gate, W:failed (see wf_create.lua)
--
-- Returns: the workflow's status, or '' if it is gone
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if status == 'running' then
  for j = 1, 7 do redis.call('PERSIST', KEYS[j]) end
end
return status
