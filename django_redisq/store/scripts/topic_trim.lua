-- topic_trim: trim a topic's stream by its retention, never past an entry some subscription has
-- not turned into a task yet (not delivered to its group, or delivered and not acknowledged),
-- unless the stream is longer than the hard cap: then it is cut to the cap and what each
-- subscription lost is counted. Redis 6.2 and 7 have no acknowledgement-aware trim, so the safe
-- point is computed here from each group's last-delivered id and its oldest pending id. Each
-- named group's "acknowledged through" id is recorded ('acked:<group>' in T:meta): a group an
-- operator deleted is recreated there (lib/topic_group.lua), and until it is, that id holds
-- entries back as the group did.
--
-- KEYS[1] -> T:stream  (STREAM)
-- KEYS[2] -> T:meta    (HASH: 'dropped' and 'dropped:<group>' counters, incremented here;
--                      'acked:<group>' set here)
-- ARGV[1] -> MAX_AGE in ms (0 = none): entries older than this may go
-- ARGV[2] -> MAX_LEN (0 = none): entries beyond the newest MAX_LEN may go
-- ARGV[3] -> HARD_MAX_LEN (0 = none): the stream never keeps more, read or not
-- ARGV[4] -> batch: MAX_LEN and the hard cap remove at most this many entries per call (the scan
--            that finds their bound is as long), the next call goes on
-- ARGV[5..] -> the groups that hold entries back (the configured subscriptions; a group of a
--              subscription no longer configured does not)
--
-- Returns: {removed by retention, dropped by the hard cap}
local key = KEYS[1]
local len = redis.call('XLEN', key)
if len == 0 then return {0, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_age, max_len, hard, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)  -- stream ids compared as (ms, seq)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local MAX_SEQ = '18446744073709551615'
local function after(id)  -- the smallest id above id: MINID after(id) removes id itself
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if seq == MAX_SEQ then return string.format('%d-0', tonumber(ms) + 1) end  -- a rewind's target ('<ms>-<max>')
  return string.format('%d-%d', tonumber(ms), tonumber(seq) + 1)
end
local function before(id)  -- the largest id below an entry's id (its seq is small: made by XADD)
  local ms, seq = parse(id)
  if seq > 0 then return string.format('%d-%d', ms, seq - 1) end
  if ms > 0 then return string.format('%d-%s', ms - 1, MAX_SEQ) end
  return '0-0'
end

-- each named group's safe point: everything below it is delivered and acknowledged
local wanted = {}
for i = 5, #ARGV do wanted[ARGV[i]] = true end
local safe = {}
local groups = redis.call('XINFO', 'GROUPS', key)
for _, g in ipairs(groups) do
  local f = {}
  for j = 1, #g, 2 do f[g[j]] = g[j + 1] end
  if wanted[f['name']] then
    local point, acked = after(f['last-delivered-id']), f['last-delivered-id']
    if tonumber(f['pending']) > 0 then
      local p = redis.call('XPENDING', key, f['name'])
      if p[2] and less(p[2], point) then point, acked = p[2], before(p[2]) end
    end
    safe[f['name']] = point
    redis.call('HSET', KEYS[2], 'acked:' .. f['name'], acked)
  end
end
for name in pairs(wanted) do  -- a deleted group, not recreated yet: what it had not acknowledged stays
  if not safe[name] then
    local acked = redis.call('HGET', KEYS[2], 'acked:' .. name)
    if acked then safe[name] = after(acked) end
  end
end
local floor = nil
for _, point in pairs(safe) do
  if not floor or less(point, floor) then floor = point end
end

-- what retention allows: an entry goes when it is older than MAX_AGE or beyond MAX_LEN
local allowed = nil
if max_age > 0 then allowed = string.format('%d-0', math.max(0, now - max_age)) end
if max_len > 0 and len > max_len then
  local k = math.min(len - max_len, batch)
  local es = redis.call('XRANGE', key, '-', '+', 'COUNT', k + 1)
  local bound = es[k + 1] and es[k + 1][1] or after(es[#es][1])
  if not allowed or less(allowed, bound) then allowed = bound end
end
local removed = 0
if allowed then
  local cut = allowed
  if floor and less(floor, cut) then cut = floor end
  removed = redis.call('XTRIM', key, 'MINID', cut)
end

-- the hard cap: cut even unread entries, and count each group's loss
local dropped = 0
len = len - removed
if hard > 0 and len > hard then
  local k = math.min(len - hard, batch)
  local es = redis.call('XRANGE', key, '-', '+', 'COUNT', k)
  local last = es[#es][1]
  for name, point in pairs(safe) do
    local lost = 0
    for _, e in ipairs(es) do
      if not less(e[1], point) then lost = lost + 1 end
    end
    if lost > 0 then redis.call('HINCRBY', KEYS[2], 'dropped:' .. name, lost) end
  end
  dropped = redis.call('XTRIM', key, 'MINID', after(last))
  redis.call('HINCRBY', KEYS[2], 'dropped', dropped)
end
return {removed, dropped}
