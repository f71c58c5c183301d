-- luacheck (Debian's lua-check): `make lint` runs it on the package and the examples.
std = "ngx_lua"
max_line_length = 100
