-- topic_prune: delete the consumers of a group that hold no pending entry and have been idle
-- at least the given time (workers that stopped), so a group's consumers do not grow with
-- every restart. Checked and deleted in one step: a consumer that read meanwhile is kept (XGROUP
-- DELCONSUMER would drop its pending entries).
--
-- KEYS[1] -> T:stream  (STREAM)
-- ARGV[1] -> group, ARGV[2] -> idle (ms)
--
-- Returns: the number of consumers deleted (0 when the group does not exist)
local r = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if type(r) == 'table' and r.err then return 0 end
local gone = 0
for _, c in ipairs(r) do
  local f = {}
  for j = 1, #c, 2 do f[c[j]] = c[j + 1] end
  if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    gone = gone + 1
  end
end
return gone
