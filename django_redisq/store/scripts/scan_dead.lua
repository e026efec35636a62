-- scan_dead (read-only): walk the dead-letter queue from a position, newest
-- first (or back toward newer), and return the ids that match a filter.
-- Positions are ranks among the entries that died at or before a snapshot
-- score, so dead letters buried while an operator pages do not shift them.
-- Each call looks at no more than ARGV[5] entries (one HMGET each), which
-- bounds how long Redis is busy; the caller loops for more.
--
-- KEYS[1] -> P:dead  (ZSET, id -> died at in Redis ms)
-- ARGV[1] -> P:          the queue's key prefix (task hashes are P:t:<id>)
-- ARGV[2] -> snapshot    highest score included ('' = the newest entry's score now)
-- ARGV[3] -> position    rank to start at, 0 = the newest entry in the snapshot
-- ARGV[4] -> direction   1 = toward older (position, position+1, ...),
--                       -1 = toward newer (position-1, position-2, ...)
-- ARGV[5] -> examine     most entries to look at in this call
-- ARGV[6] -> want        stop after this many matches (0 = count matches only)
-- ARGV[7] -> task        '' or a task path, or its trailing dotted part ('send_receipt')
-- ARGV[8] -> exception   '' or an exception class path, or its trailing part ('ValueError')
-- ARGV[9] -> search      '' or ASCII-lowercased text to find in the last error message
-- ARGV[10] -> search as typed: a task id equal to it matches too
--
-- Returns: {snapshot, entries in snapshot, next position, examined, matched,
--           id1, position1, id2, position2, ...} (ids in walking order, at most `want`)
--   next position: where a following call in the same direction continues
local prefix = ARGV[1]
local top = ARGV[2]
if top == '' then
  local newest = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  top = newest[2] or '0'
end
local base = redis.call('ZCOUNT', KEYS[1], '(' .. top, '+inf')
local total = redis.call('ZCOUNT', KEYS[1], '-inf', top)
local pos, dir = tonumber(ARGV[3]), tonumber(ARGV[4])
local examine, want = tonumber(ARGV[5]), tonumber(ARGV[6])
local task, exc, search, typed = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local filtered = task ~= '' or exc ~= '' or search ~= ''

local lo, hi
if dir > 0 then
  lo, hi = pos, math.min(pos + examine, total) - 1
else
  lo, hi = math.max(0, pos - examine), math.min(pos, total) - 1
end
local ids = {}
if hi >= lo then ids = redis.call('ZREVRANGE', KEYS[1], base + lo, base + hi) end

local function tail_is(value, wanted)
  if wanted == '' then return true end
  if not value then return false end
  if value == wanted then return true end
  return #value > #wanted and string.sub(value, -#wanted - 1) == '.' .. wanted
end

local out = {}
local examined, matched = 0, 0
local nextpos
if dir > 0 then nextpos = math.max(lo, hi + 1) else nextpos = lo end
local function check(id, rank)
  examined = examined + 1
  local ok = true
  if filtered then
    local f = redis.call('HMGET', prefix .. 't:' .. id, 'task', 'exc', 'error')
    ok = tail_is(f[1], task) and tail_is(f[2], exc)
    if ok and search ~= '' then
      ok = id == typed or (f[3] and string.find(string.lower(f[3]), search, 1, true) ~= nil) or false
    end
  end
  if ok then
    matched = matched + 1
    if want > 0 then
      out[#out + 1] = id
      out[#out + 1] = rank
      return matched >= want
    end
  end
  return false
end
if dir > 0 then
  for i = 1, #ids do
    if check(ids[i], lo + i - 1) then nextpos = lo + i; break end
  end
else
  for i = #ids, 1, -1 do
    if check(ids[i], lo + i - 1) then nextpos = lo + i - 1; break end
  end
end
local reply = {top, total, nextpos, examined, matched}
for _, v in ipairs(out) do reply[#reply + 1] = v end
return reply
