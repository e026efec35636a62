-- step_record: record one step of a durable task (django_redisq/durable/journal.py), once. The
-- first record of a name wins: a copy of the attempt running elsewhere (a reaped worker's) gets
-- the record that won, so every run of the task goes on from the same result. A sleep or a
-- wait records its due time, computed here on the Redis clock.
--
-- KEYS[1] -> P:t:<id>  (HASH) the task; the record is its field ARGV[1], so it shares the task's
--            TTL, dead letter and purge (nothing is written when the hash is missing)
-- ARGV[1] -> 'step:<name>'
-- ARGV[2] -> index      the step's position in the run (0, 1, ...)
-- ARGV[3] -> kind       'step' (a result), 'sleep' or 'wait' (a due time)
-- ARGV[4] -> took       ms the step's callable ran (0 for a sleep or a wait)
-- ARGV[5] -> result     the step's result as JSON ('null' for a sleep or a wait)
-- ARGV[6] -> 'in' / 'at' / ''   the due time is Redis now + ARGV[7] ms / ARGV[7] (epoch ms) / none
-- ARGV[7] -> ms
--
-- A record is JSON {"i": index, "k": kind, "at": Redis ms, "took": ms, "v": result JSON text,
-- "due": Redis ms or 0, "st": "done" | "waiting" (a wait until an event, wait_wake.lua) }.
--
-- Returns: {code, record, Redis ms now}: 1 recorded now, 0 recorded before (the record that
--   stands), -1 no such task (nothing written; record '')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return {-1, '', now} end
local found = redis.call('HGET', KEYS[1], ARGV[1])
if found then return {0, found, now} end
local due = 0
if ARGV[6] == 'in' then due = now + tonumber(ARGV[7]) elseif ARGV[6] == 'at' then due = tonumber(ARGV[7]) end
local state = 'done'
if ARGV[3] == 'wait' then state = 'waiting' end
local record = cjson.encode({i = tonumber(ARGV[2]), k = ARGV[3], at = now, took = tonumber(ARGV[4]), v = ARGV[5],
  due = due, st = state})
redis.call('HSET', KEYS[1], ARGV[1], record)
return {1, record, now}
