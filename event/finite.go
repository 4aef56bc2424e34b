package event

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
)

// JSON has no NaN or infinity. A record holding one (the loss of a
// diverged step) is written with null in its place and read back as NaN,
// so that the step stays visible instead of failing to encode or
// reading as 0. Row, Event and Float follow this rule.

// Float is a float64 whose JSON is null when it is NaN or infinite, and
// that reads null as NaN.
type Float float64

// MarshalJSON writes f as a JSON number, or null if it is not finite.
func (f Float) MarshalJSON() ([]byte, error) {
	if !finite(float64(f)) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// UnmarshalJSON reads a JSON number, or null as NaN.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// MarshalJSON writes the row, with null for a number that is not finite.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	return marshalNullable(plain(r))
}

// UnmarshalJSON reads a row, a null number as NaN.
func (r *Row) UnmarshalJSON(b []byte) error {
	type plain Row
	return unmarshalNullable(b, (*plain)(r))
}

// MarshalJSON writes the event, with null for a number that is not
// finite (a loss of NaN is "loss":null; no loss yet, no "loss" at all).
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	return marshalNullable(plain(e))
}

// UnmarshalJSON reads an event, a null number as NaN ("loss":null as a
// Loss pointing at NaN).
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	return unmarshalNullable(b, (*plain)(e))
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// marshalNullable encodes v, a flat struct, as encoding/json would, but
// with null for the numbers that are not finite: its float64 fields,
// *float64 fields and the values of map[string]float64 fields. A struct
// whose numbers are all finite (nearly every one) takes the standard
// encoder.
func marshalNullable(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if !hasNonFinite(rv) {
		return json.Marshal(v)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for i := range rv.NumField() {
		name, omitEmpty, ok := jsonField(rv.Type().Field(i))
		f := rv.Field(i)
		if !ok || omitEmpty && isEmpty(f) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		b.Write(key)
		b.WriteByte(':')
		var val []byte
		var err error
		switch {
		case f.Kind() == reflect.Float64:
			val, err = json.Marshal(Float(f.Float()))
		case isFloatPtr(f.Type()) && !f.IsNil():
			val, err = json.Marshal(Float(f.Elem().Float()))
		case isFloatMap(f.Type()) && !f.IsNil():
			m := make(map[string]Float, f.Len())
			for it := f.MapRange(); it.Next(); {
				m[it.Key().String()] = Float(it.Value().Float())
			}
			val, err = json.Marshal(m)
		default:
			val, err = json.Marshal(f.Interface())
		}
		if err != nil {
			return nil, err
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// unmarshalNullable decodes b into v, a pointer to a flat struct, as
// encoding/json would, but reads null for a number as NaN: for a
// float64 field, a *float64 field (then pointing at NaN) and the values
// of a map[string]float64 field.
func unmarshalNullable(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	if !bytes.Contains(b, []byte("null")) {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		name, _, ok := jsonField(rv.Type().Field(i))
		if !ok {
			continue
		}
		msg, found := raw[name]
		if !found {
			continue
		}
		f := rv.Field(i)
		switch {
		case f.Kind() == reflect.Float64 && string(msg) == "null":
			f.SetFloat(math.NaN())
		case isFloatPtr(f.Type()) && string(msg) == "null":
			f.Set(reflect.ValueOf(new(math.NaN())))
		case isFloatMap(f.Type()) && bytes.Contains(msg, []byte("null")):
			var m map[string]Float
			if err := json.Unmarshal(msg, &m); err != nil {
				return err
			}
			if f.IsNil() {
				f.Set(reflect.MakeMapWithSize(f.Type(), len(m)))
			}
			for k, x := range m {
				f.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(float64(x)))
			}
		}
	}
	return nil
}

// hasNonFinite reports whether a struct holds a number that JSON cannot.
func hasNonFinite(rv reflect.Value) bool {
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch {
		case f.Kind() == reflect.Float64:
			if !finite(f.Float()) {
				return true
			}
		case isFloatPtr(f.Type()):
			if !f.IsNil() && !finite(f.Elem().Float()) {
				return true
			}
		case isFloatMap(f.Type()):
			for it := f.MapRange(); it.Next(); {
				if !finite(it.Value().Float()) {
					return true
				}
			}
		}
	}
	return false
}

func isFloatPtr(t reflect.Type) bool {
	return t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Float64
}

func isFloatMap(t reflect.Type) bool {
	return t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Float64
}

// jsonField is the JSON name of a struct field and whether it has
// omitempty; ok is false for a field encoding/json leaves out.
func jsonField(sf reflect.StructField) (name string, omitEmpty, ok bool) {
	if !sf.IsExported() {
		return "", false, false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = sf.Name
	}
	for o := range strings.SplitSeq(opts, ",") {
		omitEmpty = omitEmpty || o == "omitempty"
	}
	return name, omitEmpty, true
}

// isEmpty is encoding/json's empty value for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
