-- topic_groups: make sure subscriptions' consumer groups exist on a topic's stream (a worker's
-- event pump, before it reads). A new group starts at its start id; an existing one is left.
--
-- KEYS[1] -> T:stream  (STREAM; created empty if missing: MKSTREAM)
-- KEYS[2] -> T:gen     (HASH subscription -> generation; set to 0 for a new group)
-- ARGV[1] -> n: the groups that follow, 2 ARGV each: group name, start id ('$' = after the newest
--            entry: "latest"; '0' = every retained entry: "earliest")
--
-- Returns: the number of groups created
local made = 0
for i = 0, tonumber(ARGV[1]) - 1 do
  local r = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[2 + 2 * i], ARGV[3 + 2 * i], 'MKSTREAM')
  if type(r) ~= 'table' or not r.err then made = made + 1 end
  redis.call('HSETNX', KEYS[2], ARGV[2 + 2 * i], 0)
end
return made
