//go:build noasm || !amd64

package kernels

func defaultGemm() *gemmImpl { return genericGemm }

func allArchGemms() []*gemmImpl { return nil }

func defaultVec() *vecImpl { return genericVec }

func allArchVecs() []*vecImpl { return nil }

func defaultOpt() *optImpl { return genericOpt }

func allArchOpts() []*optImpl { return nil }
