//go:build !unix

package load

// processCPU is not read where there is no getrusage: the report goes without cpu.
func processCPU() (float64, bool) { return 0, false }
