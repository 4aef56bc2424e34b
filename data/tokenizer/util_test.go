package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
func itoa(i int) string   { return strconv.Itoa(i) }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
