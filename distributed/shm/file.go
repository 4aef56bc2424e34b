package shm

import "os"

// Enabled reports whether shared memory may be used: on Linux, unless
// GOTRAIN_SHM=0 turns it off. It is the only reader of GOTRAIN_SHM;
// callers read it once per mesh or group they set up.
func Enabled() bool { return supported && os.Getenv("GOTRAIN_SHM") != "0" }
