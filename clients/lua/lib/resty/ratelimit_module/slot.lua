-- Redis Cluster's key hash: CRC16 (XMODEM) of the key, or of its {hash tag}, mod 16384.
local bit = require "bit"

local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift
local byte, find, sub = string.byte, string.find, string.sub

local _M = { _VERSION = "0.3.0" }

local crc_table = {}
for i = 0, 255 do
    local crc = lshift(i, 8)
    for _ = 1, 8 do
        if band(crc, 0x8000) ~= 0 then
            crc = bxor(lshift(crc, 1), 0x1021)
        else
            crc = lshift(crc, 1)
        end
    end
    crc_table[i] = band(crc, 0xFFFF)
end

local function crc16(text)
    local crc = 0
    for i = 1, #text do
        crc = bxor(band(lshift(crc, 8), 0xFFFF), crc_table[bxor(rshift(crc, 8), byte(text, i))])
    end
    return crc
end

--- The hash slot of `key`.
function _M.slot(key)
    local open = find(key, "{", 1, true)
    if open then
        local close = find(key, "}", open + 1, true)
        if close and close > open + 1 then
            key = sub(key, open + 1, close - 1)
        end
    end
    return crc16(key) % 16384
end

return _M
