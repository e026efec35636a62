-- move_out: first step of replaying dead letters into another queue (whose keys
-- are in another cluster slot, so the move takes three steps, each atomic):
--   1. move_out.lua (here, the source queue): mark each dead letter 'moving' to the
--      target and return what the copy needs. It stays in this queue's dead set, so
--      it is always findable, but no replay here takes it any more (replay.lua skips
--      state 'moving') and no move to a third queue either.
--   2. move_in.lua (the target queue): store the copy and make it pending there.
--   3. purge.lua (here): delete the original.
-- A crash after 1 leaves the task dead here, marked moving (after 2 also pending in
-- the target); moving it to the same target again finishes the move. Never in neither.
--
-- KEYS[1] -> P:dead  (ZSET) of the source queue
-- ARGV[1] -> P:      the source queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> the target queue's name
-- ARGV[3..] -> ids to move
--
-- Returns: a flat array, 10 entries per id: id, code, message, task path, errors,
--   errors_len, errors_dropped, worker ids, enqueued_at, idempotency key
--   (all '' unless code 1)
--   code  1 -> marked moving to the target (or already was: an interrupted move)
--   code  0 -> not a dead letter here (replayed, deleted or moved meanwhile)
--   code -1 -> cannot be moved: no message that is a JSON object (it stays dead here)
--   code -2 -> already being moved to another queue (it stays dead here)
--! include types.lua
local prefix, target = ARGV[1], ARGV[2]
want(KEYS[1], 'zset')
local out = {}
local function reply(id, code, f)
  out[#out + 1] = id; out[#out + 1] = code
  for j = 1, 8 do out[#out + 1] = (f and f[j]) or '' end
  out[#out + 1] = (f and f[11]) or ''  -- the priority
end
for i = 3, #ARGV do
  local id = ARGV[i]
  local tkey = prefix .. 't:' .. id
  if not redis.call('ZSCORE', KEYS[1], id) then
    reply(id, 0)
  elseif redis.call('TYPE', tkey)['ok'] ~= 'hash' then
    reply(id, -1)
  else
    local f = redis.call('HMGET', tkey, 'msg', 'task', 'errors', 'errors_len', 'errors_dropped', 'workers',
      'enqueued_at', 'idem', 'state', 'moving_to', 'prio')
    local ok = f[1] and string.match(f[1], '^%s*{') and pcall(cjson.decode, f[1])
    if not ok then
      reply(id, -1)
    elseif f[9] == 'moving' and f[10] ~= target then
      reply(id, -2)
    else
      redis.call('HSET', tkey, 'state', 'moving', 'moving_to', target)
      reply(id, 1, f)
    end
  end
end
return out
