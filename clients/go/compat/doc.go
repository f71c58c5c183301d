// Package compat holds the tests and benchmarks that run the package beside the libraries it
// replaces: go-redis/redis_rate's and go-zero's own scripts on the same server, chi and
// gorilla/mux taking the middleware as they are. A module of its own, so that the package's
// users never download what only these tests need.
package compat
