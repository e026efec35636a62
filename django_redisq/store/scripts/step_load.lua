-- step_load: a durable task's recorded steps (django_redisq/durable/), read when its attempt
-- reaches its first step. Read-only. Steps are fields 'step:<name>' of the task hash, so they
-- live and die with the task (its RESULT_TTL, its dead letter, a purge) and stay in its slot.
--
-- KEYS[1] -> P:t:<id>  (HASH) the task
-- ARGV[1] -> none: the script takes no arguments
--
-- Returns: {Redis ms now, exists (1/0), field_1, record_1, ...}: each 'step:<name>' field and its
--   record (JSON written by step_record.lua); exists 0 when the task hash is missing or not a hash
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 0}
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return out end
out[2] = 1
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 5) == 'step:' then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
