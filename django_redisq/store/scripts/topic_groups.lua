-- topic_groups: make sure subscriptions' consumer groups exist on a topic's stream (a worker's
-- event pump, before it reads, and again when a read finds its group missing). A new group
-- starts at its start id; an existing one is left; one that existed and was deleted is
-- recreated where its subscription stood, and counted (lib/topic_group.lua).
--
-- KEYS[1] -> T:stream  (STREAM; created empty if missing: MKSTREAM)
-- KEYS[2] -> T:gen     (HASH subscription -> generation; set to 0 for a new group)
-- KEYS[3] -> T:meta    (HASH: 'acked:<group>' read; 'regrouped:<group>', 'regrouped' incremented)
-- ARGV[1] -> n: the groups that follow, 2 ARGV each: group name, start id ('$' = after the newest
--            entry: "latest"; '0' = every retained entry: "earliest")
--
-- Returns: {created, group_1, at_1, ...}: created counts the groups made (new or recreated),
--   then each recreated group with the id it was recreated at
--! include topic_group.lua
local out = {0}
for i = 0, tonumber(ARGV[1]) - 1 do
  local name = ARGV[2 + 2 * i]
  local got = ensure_group(KEYS[1], KEYS[2], KEYS[3], name, ARGV[3 + 2 * i])
  redis.call('HSETNX', KEYS[2], name, 0)  -- an existing group made before T:gen knew it (older versions)
  if got ~= 0 then out[1] = out[1] + 1 end
  if type(got) == 'string' then
    out[#out + 1] = name
    out[#out + 1] = got
  end
end
return out
