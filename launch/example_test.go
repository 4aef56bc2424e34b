package launch_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/launch"
)

// Run starts two workers of any program; each learns its place in the job
// from the environment, and its output comes back prefixed with its rank.
func ExampleRun() {
	var out bytes.Buffer
	code, err := launch.Run(context.Background(), launch.Config{
		Program:      "sh",
		Args:         []string{"-c", `echo "rank $RANK of $WORLD_SIZE, local rank $LOCAL_RANK"`},
		NProcPerNode: 2,
		Standalone:   true,
		Stdout:       &out,
		Logger:       slog.New(slog.DiscardHandler),
	})
	// The workers run concurrently: sort their lines for a stable example.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Println("exit code", code, "error", err)
	// Output:
	// [rank0]: rank 0 of 2, local rank 0
	// [rank1]: rank 1 of 2, local rank 1
	// exit code 0 error <nil>
}
