// Package testbrowser gives tests a headless Chromium to drive with
// chromedp, or skips them when none is installed (fails them when
// GOTRAIN_REQUIRE_ENGINES=1, as in CI).
package testbrowser

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotrain/gotrain/internal/testenv"
)

// Chromium returns the Chromium binary, or skips t without one (fails it
// with GOTRAIN_REQUIRE_ENGINES=1).
func Chromium(t testing.TB) string {
	t.Helper()
	return testenv.LookPath(t, "chromium", "chromium-browser", "google-chrome")
}

// Context starts a headless Chromium window of 1280×900 for t, ended
// when t ends, and returns a chromedp context on it bounded by limit.
func Context(t testing.TB, limit time.Duration) context.Context {
	t.Helper()
	exe := Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, limit)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	return ctx
}
