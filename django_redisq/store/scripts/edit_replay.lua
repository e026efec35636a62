-- edit_replay: rewrite one dead letter's message (its arguments, edited in the admin)
-- and replay it, in one step: nobody can see the new arguments on a task that stays
-- dead, or replay the old ones. Refused if the stored message is no longer the one
-- the operator edited (another edit, a replay, a move or a purge came first).
-- The replay itself is replay.lua's: counts restart at zero, history and the
-- idempotency key are kept.
--
-- KEYS[1] -> P:dead     (ZSET)
-- KEYS[2] -> P:pending  (LIST)
-- KEYS[3] -> P:prioritized (ZSET) and KEYS[4] -> P:prioseq (STRING): it keeps its priority (lib/ready.lua)
-- ARGV[1] -> P:         the queue's key prefix (the task hash P:t:<id>, idempotency keys)
-- ARGV[2] -> the task id
-- ARGV[3] -> SHA-1 (hex) of the message the edit started from
-- ARGV[4] -> the new message (JSON, checked by the caller: admin/edit.py)
--
-- Returns: 1 -> rewritten and replayed
--          0 -> not in this queue's dead letters (any more), or being moved, or its data is not a hash
--         -1 -> the stored message changed since the edit started: nothing written
--! include idem.lua
--! include ready.lua
local prefix, id = ARGV[1], ARGV[2]
local tkey = prefix .. 't:' .. id
want(KEYS[1], 'zset')
want(KEYS[2], 'list')
want(KEYS[3], 'zset')
if not redis.call('ZSCORE', KEYS[1], id) or redis.call('TYPE', tkey)['ok'] ~= 'hash' then return 0 end
local f = redis.call('HMGET', tkey, 'msg', 'state', 'idem', 'replayed', 'edited')
if f[2] == 'moving' then return 0 end
if redis.sha1hex(f[1] or '') ~= ARGV[3] then return -1 end
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', tkey, 'msg', ARGV[4], 'state', 'pending', 'failures', 0, 'deliveries', 0,
  'replayed', (tonumber(f[4]) or 0) + 1, 'edited', (tonumber(f[5]) or 0) + 1)
redis.call('HDEL', tkey, 'died_at', 'reason', 'finished_at')
ready(KEYS[2], KEYS[3], KEYS[4], id, stored_prio(tkey), false)
idem_take(prefix, f[3], id)  -- pending again: it holds its key with no TTL
return 1
