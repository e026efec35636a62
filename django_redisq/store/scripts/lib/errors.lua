-- lib/errors.lua: the one way to append to a task's error history, spliced
-- into every script that records a failure (`--! include errors.lua`).
--
-- Task hash fields:
--   errors          JSON list of {"exc", "msg", "tb", "at"} objects, oldest first
--   errors_len      the byte length of each entry, comma-joined, so the list is
--                   appended to and cut with string operations, never decoded
--   errors_dropped  how many attempts between the first ERRORS_FIRST and the
--                   last ERRORS_LAST were left out (absent = none)
-- Any other shape (missing, '', '[]', not JSON, an object, a list of
-- non-objects, lengths that do not add up: another producer or an older
-- version) is decoded once with cjson and rewritten in this form, keeping
-- whatever can be shown. "at" is always the script's Redis time.
local ERRORS_FIRST, ERRORS_LAST = 1, 19
local ERRORS_MAX_TEXT = 32768

local function error_object(msg, tb, at)
  return cjson.encode({exc = '', msg = msg, tb = tb or '', at = at or 0})
end

-- one stored entry (text of a JSON object) from a decoded value of any kind
local function error_as_entry(v)
  if type(v) == 'table' and #v == 0 then  -- a JSON object (or an empty one)
    local ok, text = pcall(cjson.encode, v)
    if ok then return text end
  end
  local text = v
  if type(v) ~= 'string' then
    local ok, t = pcall(cjson.encode, v)
    text = ok and t or tostring(v)
  end
  return error_object(string.sub(text, 1, ERRORS_MAX_TEXT))
end

-- the entries (texts) of a stored errors field of any shape
local function errors_parse(errs)
  if not errs or errs == '' then return {} end
  local ok, v = pcall(cjson.decode, errs)
  if not ok then
    return {error_object('earlier errors were stored in a form that does not decode', string.sub(errs, 1, ERRORS_MAX_TEXT))}
  end
  if type(v) ~= 'table' then return {error_as_entry(v)} end
  if #v == 0 then
    if next(v) == nil then return {} end
    return {error_as_entry(v)}  -- one object instead of a list
  end
  local out = {}
  for i = 1, #v do out[i] = error_as_entry(v[i]) end
  return out
end

-- the new entry, from the error JSON a worker sent, with "at" set to now
local function error_entry(raw, now)
  -- the usual shape (json.dumps of runner.error_dict: "at" last): replace the number as text
  -- (searched from near the end only: tracebacks are long)
  local s = string.find(raw, '[,{]"at":%-?[%d.eE+-]+}$', math.max(1, #raw - 40))
  if s and string.byte(raw, 1) == 123 then return string.sub(raw, 1, s + 5) .. now .. '}' end
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' and #v == 0 and next(v) ~= nil then
    v.at = now
    local ok2, text = pcall(cjson.encode, v)
    if ok2 then return text end
  end
  return error_object(string.sub(raw, 1, ERRORS_MAX_TEXT), '', now)
end

-- errors_append(errs, lens, dropped, raw, now) -> errors, errors_len, errors_dropped (to HSET)
local function errors_append(errs, lens, dropped, raw, now)
  local e = error_entry(raw, now)
  local sizes = {}
  local trusted = false
  if errs == '[]' and (lens == nil or lens == '') then
    trusted = true
  elseif errs and lens and lens ~= '' and string.byte(errs, 1) == 91 and string.byte(errs, -1) == 93 then
    local total = 1
    for n in string.gmatch(lens, '[^,]+') do
      n = tonumber(n)
      if not n or n < 2 then total = -1; break end
      sizes[#sizes + 1] = n
      total = total + n + 1
    end
    trusted = total == #errs
  end
  if not trusted then
    local entries = errors_parse(errs)
    sizes = {}
    for i, text in ipairs(entries) do sizes[i] = #text end
    errs = '[' .. table.concat(entries, ',') .. ']'
  end
  if #sizes == 0 then errs = '[' .. e .. ']' else errs = string.sub(errs, 1, -2) .. ',' .. e .. ']' end
  sizes[#sizes + 1] = #e
  dropped = tonumber(dropped) or 0
  local excess = #sizes - ERRORS_FIRST - ERRORS_LAST
  if excess > 0 then
    -- cut ',' .. entry for entries ERRORS_FIRST+1 .. ERRORS_FIRST+excess
    local at = 1 + ERRORS_FIRST
    for i = 1, ERRORS_FIRST do at = at + sizes[i] end
    local cut = 0
    for i = ERRORS_FIRST + 1, ERRORS_FIRST + excess do cut = cut + sizes[i] + 1 end
    errs = string.sub(errs, 1, at - 1) .. string.sub(errs, at + cut)
    local kept = {}
    for i = 1, #sizes do
      if i <= ERRORS_FIRST or i > ERRORS_FIRST + excess then kept[#kept + 1] = sizes[i] end
    end
    sizes = kept
    dropped = dropped + excess
  end
  return errs, table.concat(sizes, ','), dropped
end
