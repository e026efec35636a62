-- step_clear: an operator clears one recorded step of a task (admin, redisq task ID --clear-step),
-- so its next run calls the step again. Only while the task is not running: a running attempt
-- has read its steps already, and would go on from the cleared one's result.
--
-- KEYS[1] -> P:t:<id>  (HASH) the task
-- ARGV[1] -> 'step:<name>'
--
-- Returns: 1 cleared; 0 no such step; -1 no such task; -2 the task is running (nothing cleared)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return -1 end
if redis.call('HGET', KEYS[1], 'state') == 'running' then return -2 end
return redis.call('HDEL', KEYS[1], ARGV[1])
