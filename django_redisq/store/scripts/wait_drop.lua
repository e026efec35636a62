-- wait_drop: waiters a publish woke, or found stale (their task gone or no longer waiting), leave
-- the topic's waiters (events/publish.py; django_redisq/durable/).
--
-- KEYS[1] -> T:waiters  (HASH)
-- ARGV[1] .. ARGV[n] -> the waiters' fields
--
-- Returns: how many were dropped
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
return redis.call('HDEL', KEYS[1], unpack(ARGV))
