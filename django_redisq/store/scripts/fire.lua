-- fire: claim the due ticks of one schedule and enqueue their tasks, in one step,
-- so a tick is never claimed without its task nor enqueued twice, however many
-- schedulers try (DESIGN invariant 11). A claim is a compare-and-set of the
-- schedule's last claimed tick: it wins only if the marker still holds the value
-- the scheduler read and the new tick is newer.
--
-- KEYS[1] -> P:pending          (LIST)
-- KEYS[2] -> P:scheduled        (ZSET, untouched: periodic tasks are pending at once)
-- KEYS[3] -> P:sched:<name>     (HASH) the schedule's marker: last (last claimed tick, Redis ms),
--                               last_run (tick of the last task enqueued), last_id (its task id),
--                               claimed_at (Redis ms), fired / missed / skipped / paused_ticks
--                               (counters); paused (Redis ms, '' = not paused), paused_by,
--                               paused_from / resumed_at (the last pause, see schedule_resume.lua);
--                               manual_id / manual_at (the last "run now", schedule_run.lua)
-- KEYS[4] -> P:prioritized      (ZSET) and KEYS[5] -> P:prioseq (STRING), for a task of a priority
--                               other than 0 (lib/ready.lua)
-- ARGV[1] -> P:                 the queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> expected           the marker's last as the scheduler read it ('' = no marker)
-- ARGV[3] -> upto               the newest due tick (ms); the marker's last becomes this
-- ARGV[4] -> missed             due ticks in (expected, upto] given up by the catch-up policy
-- ARGV[5] -> max lateness (ms)  a listed tick older than this on the Redis clock is not run
--                               (counted missed): guards a scheduler paused before its claim
-- ARGV[6] -> allow overlap      '1', or '0': skip (and count) a tick while the previous
--                               tick's task (or the last "run now") is pending, scheduled or running
-- ARGV[7] -> marker ttl (ms)    renewed on each claim, so a removed schedule's marker expires
--                               (not while paused: a paused marker does not expire)
-- ARGV[8] -> task path
-- ARGV[9] -> id base            a tick's task id is ARGV[9] .. tick
-- ARGV[10] -> n                 ticks to run, ascending, each <= upto; then n pairs: tick, message JSON
-- ARGV[11 + 2n] -> priority     of the tasks (-100..100; 0 the default)
-- ARGV[12 + 2n] -> limits       of the tasks ('' = none; see lib/store.lua)
--
-- A listed tick at or after the pause began, and (once resumed) at or before the
-- resume, is not run: it is counted in paused_ticks. The claim still moves the
-- marker, so a tick that passed while paused is never run later.
--
-- Returns: {code, last, fired, missed, skipped, paused, id...}
--   code  1 -> claimed; fired/missed/skipped/paused are this call's, ids the tasks enqueued
--         0 -> not claimed: the marker already holds upto or a newer tick (another scheduler won)
--        -1 -> not claimed: the marker moved since it was read; read it again (last = its value)
--        -2 -> not claimed: upto is in the future on the Redis clock
--! include store.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, marker = ARGV[1], KEYS[3]
local upto = tonumber(ARGV[3])
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
want(KEYS[4], 'zset')
local q = {pending = KEYS[1], scheduled = KEYS[2], prioritized = KEYS[4], seq = KEYS[5]}
local prio = tonumber(ARGV[11 + 2 * tonumber(ARGV[10])]) or 0
local limits = ARGV[12 + 2 * tonumber(ARGV[10])] or ''
want(marker, 'hash')
local last = redis.call('HGET', marker, 'last') or ''
if tonumber(last) and tonumber(last) >= upto then return {0, last, 0, 0, 0, 0} end
if last ~= ARGV[2] then return {-1, last, 0, 0, 0, 0} end
if upto > now then return {-2, last, 0, 0, 0, 0} end
local missed, skipped, fired = tonumber(ARGV[4]), 0, 0
local late = tonumber(ARGV[5])
local overlap = ARGV[6] == '1'
local prev = redis.call('HGET', marker, 'last_id')
local manual = redis.call('HGET', marker, 'manual_id')
local unfinished = function(id)
  if not id then return false end
  local state = redis.call('HGET', prefix .. 't:' .. id, 'state')
  return state == 'pending' or state == 'scheduled' or state == 'running'
end
-- the pause window: [paused, now] while paused; else the last one, [paused_from, resumed_at]
local pause_from, pause_to = tonumber(redis.call('HGET', marker, 'paused') or ''), now
if not pause_from then
  pause_from = tonumber(redis.call('HGET', marker, 'paused_from') or '')
  pause_to = tonumber(redis.call('HGET', marker, 'resumed_at') or '') or -1
end
local held = 0
local out = {1, tostring(upto), 0, 0, 0, 0}
for i = 0, tonumber(ARGV[10]) - 1 do
  local tick, msg = ARGV[11 + i * 2], ARGV[12 + i * 2]
  local busy = not overlap and (unfinished(prev) or unfinished(manual))
  if pause_from and tonumber(tick) >= pause_from and tonumber(tick) <= pause_to then
    held = held + 1
  elseif now - tonumber(tick) > late then
    missed = missed + 1
  elseif busy then
    skipped = skipped + 1
  else
    local id = ARGV[9] .. tick
    if store_task(prefix, q, now, id, msg, ARGV[8], 0, '', prio, limits) == '' then
      fired = fired + 1
      prev = id
      out[#out + 1] = id
      redis.call('HSET', marker, 'last_run', tick, 'last_id', id)
    end
  end
end
redis.call('HSET', marker, 'last', upto, 'claimed_at', now)
if fired > 0 then redis.call('HINCRBY', marker, 'fired', fired) end
if missed > 0 then redis.call('HINCRBY', marker, 'missed', missed) end
if skipped > 0 then redis.call('HINCRBY', marker, 'skipped', skipped) end
if held > 0 then redis.call('HINCRBY', marker, 'paused_ticks', held) end
if (redis.call('HGET', marker, 'paused') or '') == '' then redis.call('PEXPIRE', marker, tonumber(ARGV[7])) end
out[3], out[4], out[5], out[6] = fired, missed, skipped, held
return out
