package distributed_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/distributed"
)

// env:// with a malformed RANK or WORLD_SIZE fails at once, naming the
// variable and its value.
func TestInitMalformedRankEnv(t *testing.T) {
	for _, tc := range []struct{ rank, world, want string }{
		{"0", "abc", `WORLD_SIZE="abc"`},
		{"x", "2", `RANK="x"`},
	} {
		t.Setenv("RANK", tc.rank)
		t.Setenv("WORLD_SIZE", tc.world)
		g, err := distributed.Init(context.Background(), distributed.Config{InitMethod: "env://"})
		if err == nil {
			g.Destroy()
			t.Fatalf("RANK=%s WORLD_SIZE=%s: Init succeeded", tc.rank, tc.world)
		}
		if !errors.Is(err, distributed.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("RANK=%s WORLD_SIZE=%s: %v; want ErrConfig naming %s", tc.rank, tc.world, err, tc.want)
		}
	}
}
