-- wf_adopt: make a task enqueued earlier a parent in a workflow (``depends_on``), in the
-- task's own queue slot: its saved metadata gets the workflow's marker, so the worker that
-- settles it records it in the workflow (worker/flows.py). Refused if the metadata changed
-- since the caller read it (the caller reads again and retries).
--
-- KEYS[1] -> P:t:<id>  (HASH) the task
-- ARGV[1] -> the task's saved metadata as the caller read it ('' = none saved)
-- ARGV[2] -> the new metadata (JSON): the same with the marker added
--
-- Returns: {'missing'} no such task; {'finished', result JSON} it succeeded already (the caller
--          records it itself); {'dead'} it failed for good; {'changed'} metadata changed since
--          it was read; {state} marked ('pending', 'scheduled', 'running', 'moving'); a task
--          that runs now was fetched before the marker, so the caller also checks it later
local tkey = KEYS[1]
if redis.call('TYPE', tkey)['ok'] ~= 'hash' then return {'missing'} end
local f = redis.call('HMGET', tkey, 'state', 'metadata', 'result', 'msg')
if not f[4] then return {'missing'} end
if f[1] == 'finished' then return {'finished', f[3] or 'null'} end
if f[1] == 'dead' then return {'dead'} end
if (f[2] or '') ~= ARGV[1] then return {'changed'} end
redis.call('HSET', tkey, 'metadata', ARGV[2])
return {f[1] or 'pending'}
