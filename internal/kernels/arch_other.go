//go:build noasm || !amd64

package kernels

func defaultGemm() *gemmImpl { return genericGemm }

func allArchGemms() []*gemmImpl { return nil }
