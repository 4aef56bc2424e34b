package shm

import (
	"fmt"
	"os"
)

// Need is how many bytes of /dev/shm a group of size ranks keeps mapped on
// a host that runs local of them, with shared memory on: a Ring for every
// pair of local ranks, so it grows with local², and the allreduce Arena
// when every rank is local (2 to ArenaMaxRanks of them). Each file counts
// in whole pages, as tmpfs reserves it. Files stay reserved while the
// group lives although they are unlinked once mapped; each further group
// (NewGroup) needs its own.
func Need(local, size int) int64 {
	if local < 0 || local > size {
		panic(fmt.Sprintf("shm: Need: %d local ranks of a group of %d", local, size))
	}
	pairs := int64(local) * int64(local-1) / 2
	n := pairs * pageRound(ringSize)
	if local == size && size >= 2 && size <= ArenaMaxRanks {
		n += pageRound(arenaFileSize(size))
	}
	return n
}

// pageRound rounds n up to whole pages.
func pageRound(n int) int64 {
	p := int64(os.Getpagesize())
	return (int64(n) + p - 1) / p * p
}
