-- lib/shape.lua: refuse to run on structural keys of the wrong type
-- (`--! include shape.lua`). A queue's own lists and sets (pending, a
-- processing list, the heartbeat set) are never set aside the way a task's
-- keys are (lib/types.lua): the script answers a clear error before its first
-- write, and the caller logs it and tries again later.

-- wrong_shape(kinds): an error reply naming the first KEYS[i] that is neither missing
-- nor of type kinds[i]; nil when every one is fine
local function wrong_shape(kinds)
  for i, want in ipairs(kinds) do
    local kt = redis.call('TYPE', KEYS[i])['ok']
    if kt ~= want and kt ~= 'none' then
      return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is a ' .. kt .. ', expected a ' .. want .. ' (written by another program?)')
    end
  end
  return nil
end
