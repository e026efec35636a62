-- bury_event: dead-letter an event that cannot become its subscription's task (its entry is not
-- a JSON object, its message is too large, or enqueueing it kept failing), as a task with the
-- reason, so operators see it beside every dead letter and can edit and replay it. Nothing is
-- written if the task exists (an earlier delivery of the entry did become it).
--
-- KEYS[1] -> P:dead     (ZSET, score = died at, Redis ms)
-- KEYS[2] -> P:t:<id>   (HASH: the task, created dead)
-- ARGV[1] -> P:         the queue's key prefix (dead_count counters, trimmed dead letters)
-- ARGV[2] -> id         the task id the event would have had
-- ARGV[3] -> message JSON (the call, with the payload as far as it could be read), ARGV[4] -> task path
-- ARGV[5] -> reason     'bad_event' or 'event_undeliverable'
-- ARGV[6] -> error JSON {"exc", "msg", "tb", "at"}, ARGV[7] -> its message, ARGV[8] -> its class path
-- ARGV[9] -> dead-letter retention (ms, 0 = keep), ARGV[10] -> max dead letters (0 = no limit)
--
-- Returns: 1 buried; 0 the task already exists (nothing written)
--! include dead.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, id = ARGV[1], ARGV[2]
want(KEYS[1], 'zset')
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local errs, lens = errors_append(nil, nil, 0, ARGV[6], now)
redis.call('HSET', KEYS[2], 'msg', ARGV[3], 'task', ARGV[4], 'state', 'dead', 'enqueued_at', now, 'died_at', now,
  'reason', ARGV[5], 'error', ARGV[7], 'exc', ARGV[8], 'errors', errs, 'errors_len', lens, 'deliveries', 0, 'failures', 0,
  'idem', '')
redis.call('ZADD', KEYS[1], now, id)
count(prefix, 'dead_count', 1, now)
trim_dead(prefix, KEYS[1], now, ARGV[9], ARGV[10])
return 1
