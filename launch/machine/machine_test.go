package machine

import (
	"os"
	"testing"
)

// files is a fake file system for the readers.
type files map[string]string

func (f files) read(name string) ([]byte, error) {
	if s, ok := f[name]; ok {
		return []byte(s), nil
	}
	return nil, os.ErrNotExist
}

const meminfo = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"

func TestMemAvailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fs     files
		want   int64
		source string
	}{
		{"meminfo only", files{"/proc/meminfo": meminfo}, 20000000 * 1024, "MemAvailable in /proc/meminfo"},
		{"cgroup v2 below", files{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/job/a\n",
			"/sys/fs/cgroup/job/a/memory.max": "max\n", "/sys/fs/cgroup/job/memory.max": "1073741824\n",
			"/sys/fs/cgroup/job/memory.current": "536870912\n", "/sys/fs/cgroup/job/memory.stat": "anon 1\ninactive_file 268435456\n"},
			1073741824 - (536870912 - 268435456), "cgroup v2 memory.max"},
		{"cgroup v2 in its own namespace", files{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n",
			"/sys/fs/cgroup/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.current": "1073741824\n"},
			1073741824, "cgroup v2 memory.max"},
		{"cgroup v2 above meminfo", files{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n",
			"/sys/fs/cgroup/memory.max": "1099511627776\n", "/sys/fs/cgroup/memory.current": "0\n"},
			20000000 * 1024, "MemAvailable in /proc/meminfo"},
		{"cgroup v1", files{"/proc/meminfo": meminfo, "/proc/self/cgroup": "4:memory:/docker/x\n3:cpu:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes":          "9223372036854771712\n",
			"/sys/fs/cgroup/memory/docker/x/memory.limit_in_bytes": "3221225472\n",
			"/sys/fs/cgroup/memory/docker/x/memory.usage_in_bytes": "1073741824\n",
			"/sys/fs/cgroup/memory/docker/x/memory.stat":           "total_inactive_file 1073741824\n"},
			3221225472, "cgroup v1 memory.limit_in_bytes"},
		{"usage over limit", files{"/proc/meminfo": meminfo, "/proc/self/cgroup": "0::/\n",
			"/sys/fs/cgroup/memory.max": "100\n", "/sys/fs/cgroup/memory.current": "200\n"}, 0, "cgroup v2 memory.max"},
		{"nothing readable", files{}, 0, ""},
	} {
		got, source := memAvailable(tc.fs.read)
		if got != tc.want || source != tc.source {
			t.Errorf("%s: %d from %q, want %d from %q", tc.name, got, source, tc.want, tc.source)
		}
	}
}
