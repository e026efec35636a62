-- lib/types.lua: key type checks, spliced into scripts by `--! include types.lua`.
-- Redis does not roll back a script that fails half-way, and a command on a
-- key of the wrong type fails (WRONGTYPE). So a script checks each key's TYPE
-- before it first uses it, and sets aside a key of the wrong type to
-- <key>:corrupt (the same slot; kept CORRUPT_TTL ms for inspection), then
-- carries on as if the key were missing. Setting aside cannot fail.
local CORRUPT_TTL = 604800000

-- set_aside(key, ttl): rename key to key .. ':corrupt', expiring after ttl ms (0 or nil = CORRUPT_TTL)
local function set_aside(key, ttl)
  local dest = key .. ':corrupt'
  redis.call('RENAME', key, dest)
  ttl = tonumber(ttl) or 0
  if ttl <= 0 then ttl = CORRUPT_TTL end
  redis.call('PEXPIRE', dest, ttl)
  return dest
end

-- want(key, kind): the key's type, 'none' or `kind`; a key of another type is set aside first
local function want(key, kind)
  local kt = redis.call('TYPE', key)['ok']
  if kt == kind or kt == 'none' then return kt end
  set_aside(key)
  return 'none'
end

-- wrote(cmd, key, ...): redis.call(cmd, key, ...) with the key's type checked by the reply, not a TYPE
-- first: a key of another type (WRONGTYPE) is set aside and the write made again; any other error
-- (OOM over maxmemory, a read-only replica) is raised by that same write, with nothing set aside
local function wrote(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 9) == 'WRONGTYPE' then set_aside(key) end
    r = redis.call(cmd, key, ...)
  end
  return r
end

-- incr(key, n, ttl): INCRBY that cannot fail: a counter that is not an integer (or
-- would overflow) is set aside and restarted. ttl (ms, optional) is set when the key is new.
local function incr(key, n, ttl)
  local v = redis.pcall('INCRBY', key, n)
  if type(v) == 'table' and v.err then
    set_aside(key)
    v = redis.call('INCRBY', key, n)
  end
  if ttl and v == n then redis.call('PEXPIRE', key, ttl) end
  return v
end

-- count(prefix, name, n, now): bump the counter P:<name> and its per-minute twin (kept 2 hours)
local function count(prefix, name, n, now)
  if n <= 0 then return end
  incr(prefix .. name, n)
  incr(prefix .. name .. ':' .. math.floor(now / 60000), n, 7200000)
end
