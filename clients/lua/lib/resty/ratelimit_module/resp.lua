-- RESP, the protocol, for the limiters' own calls: a command is one string, sent in one write
-- (a table of fragments costs the socket a C API call per fragment, more than the string
-- costs to build), and a reply is read with as few reads as it arrives in (usually one),
-- where lua-resty-redis reads each line of an array apart. What it returns is what
-- lua-resty-redis returns: a string, a number, ngx.null, a table, or false and the error text
-- for an error reply ({false, text} inside an array).
local null = ngx.null
local byte, find, sub = string.byte, string.find, string.sub
local concat = table.concat
local tonumber, tostring, type = tonumber, tostring, type
local found_new_tab, new_tab = pcall(require, "table.new")
if not found_new_tab then
    new_tab = function() return {} end
end

local _M = { _VERSION = "0.3.0" }

--- The RESP of `args` from `first` to `last` (the end, by default), each a bulk string
--- (numbers as tostring writes them), without the array's header.
local function encode_args(args, first, last)
    local n = last or #args
    local fragments = new_tab(2 * (n - first + 1), 0)
    local at = 0
    for i = first, n do
        local arg = args[i]
        if type(arg) ~= "string" then
            arg = tostring(arg)
        end
        fragments[at + 1] = "$" .. #arg .. "\r\n"
        fragments[at + 2] = arg .. "\r\n"
        at = at + 2
    end
    return concat(fragments)
end
_M.encode_args = encode_args

--- The command `args` (strings and numbers; numbers as tostring writes them) as RESP.
local function encode(args)
    return "*" .. #args .. "\r\n" .. encode_args(args, 1)
end
_M.encode = encode

--- A command whose arguments are all known but its key, the second: what `with_key` makes
--- a command of, at the cost of one concatenation. For a limiter's calls, made when its
--- parameters are set.
function _M.template(args)
    return { head = "*" .. #args .. "\r\n" .. encode_args({ args[1] }, 1),
        tail = encode_args(args, 3) }
end

--- The command of `template` (from `template`) for `key`: what `encode` gives of the same
--- arguments.
local function with_key(template, key)
    return template.head .. "$" .. #key .. "\r\n" .. key .. "\r\n" .. template.tail
end
_M.with_key = with_key

--- `limiter:command(key, commit)` encoded, from the two templates the limiter keeps in its
--- `templates` (made on first use; a limiter clears them when its parameters change). A
--- limiter's `encoded` method.
function _M.encoded(limiter, key, commit)
    local templates = limiter.templates
    if not templates then
        templates = { [true] = _M.template(limiter:command("", true)),
            [false] = _M.template(limiter:command("", false)) }
        limiter.templates = templates
    end
    return with_key(templates[commit and true or false], key)
end

-- Parses one reply from `buf` at `pos`: the value and the position after it, or nil when
-- `buf` does not hold all of it yet. An error reply is false and its text.
local function parse(buf, pos)
    local eol = find(buf, "\r\n", pos, true)
    if not eol then
        return nil
    end
    local prefix = byte(buf, pos)
    if prefix == 58 then -- ':'
        return tonumber(sub(buf, pos + 1, eol - 1)), eol + 2
    elseif prefix == 42 then -- '*'
        local n = tonumber(sub(buf, pos + 1, eol - 1))
        if not n or n < 0 then
            return null, eol + 2
        end
        local vals = new_tab(n, 0)
        local at = eol + 2
        for i = 1, n do
            local value, next_at, err = parse(buf, at)
            if next_at == nil then
                return nil, nil, err
            end
            vals[i] = value == false and { false, err } or value
            at = next_at
        end
        return vals, at
    elseif prefix == 36 then -- '$'
        local len = tonumber(sub(buf, pos + 1, eol - 1))
        if not len or len < 0 then
            return null, eol + 2
        end
        local last = eol + 1 + len
        if #buf < last + 2 then
            return nil
        end
        return sub(buf, eol + 2, last), last + 3
    elseif prefix == 43 then -- '+'
        return sub(buf, pos + 1, eol - 1), eol + 2
    elseif prefix == 45 then -- '-'
        return false, eol + 2, sub(buf, pos + 1, eol - 1)
    end
    return nil, nil, "bad reply"
end
_M.parse = parse

--- Reads one reply from `sock`: the value, or nil and the error when the socket failed
--- (then not reusable), or false and the text of an error reply.
local function read_reply(sock)
    local buf, err = sock:receiveany(4096)
    if not buf then
        return nil, err
    end
    while true do
        local value, after, text = parse(buf, 1)
        if after then
            if after <= #buf then
                return nil, "more than one reply"
            end
            if value == false then
                return false, text
            end
            return value
        elseif text then
            return nil, text
        end
        local more
        more, err = sock:receiveany(65536)
        if not more then
            return nil, err
        end
        buf = buf .. more
    end
end
_M.read_reply = read_reply

--- Sends `args` (a list, or a command already encoded) on `sock` and reads the reply, as
--- read_reply returns it.
function _M.command(sock, args)
    local ok, err = sock:send(type(args) == "string" and args or encode(args))
    if not ok then
        return nil, err
    end
    return read_reply(sock)
end

return _M
