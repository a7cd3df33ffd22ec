package journald

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Canonical returns the canonical JSON bytes of a value (docs/protocol.md#canonical-json): UTF-8, object keys
// sorted by Unicode code point, separators "," and ":", no insignificant whitespace,
// non-ASCII characters written as themselves, integers only.
//
// Accepted values: nil, bool, string, every Go integer type, *big.Int, json.Number and
// json.RawMessage (re-canonicalized; both must hold integers only), []any and other slices,
// map[string]any and other maps with string keys. Floats are refused: records carry no
// floating-point numbers (raw model JSON travels as text).
//
// The output matches Python's json.dumps(sort_keys=True, separators=(",", ":"),
// ensure_ascii=False) byte for byte; unlike encoding/json it never escapes <, >, &,
// U+2028 or U+2029, and it never turns numbers into float64.
func Canonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CanonicalText parses JSON text (keeping integers exact) and returns its canonical bytes.
func CanonicalText(text []byte) ([]byte, error) {
	v, err := ParseJSON(text)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// ParseJSON decodes JSON text with numbers kept as json.Number (never float64). Text that
// is not valid UTF-8, or escapes a lone surrogate (\ud800), is refused, as Python and
// TypeScript refuse it: encoding/json alone would silently turn both into U+FFFD.
func ParseJSON(text []byte) (any, error) {
	if !utf8.Valid(text) {
		return nil, fmt.Errorf("journald: invalid JSON: not UTF-8")
	}
	if err := checkSurrogateEscapes(text); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("journald: invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("journald: invalid JSON: trailing data")
	}
	return v, nil
}

// SHA256Hex is the lowercase hex SHA-256 of data.
func SHA256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case string:
		return writeString(buf, x)
	case json.Number:
		return writeIntegerText(buf, string(x))
	case json.RawMessage:
		inner, err := CanonicalText(x)
		if err != nil {
			return err
		}
		buf.Write(inner)
	case *big.Int:
		buf.WriteString(x.String())
	case int:
		buf.WriteString(strconv.FormatInt(int64(x), 10))
	case int8:
		buf.WriteString(strconv.FormatInt(int64(x), 10))
	case int16:
		buf.WriteString(strconv.FormatInt(int64(x), 10))
	case int32:
		buf.WriteString(strconv.FormatInt(int64(x), 10))
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case uint:
		buf.WriteString(strconv.FormatUint(uint64(x), 10))
	case uint8:
		buf.WriteString(strconv.FormatUint(uint64(x), 10))
	case uint16:
		buf.WriteString(strconv.FormatUint(uint64(x), 10))
	case uint32:
		buf.WriteString(strconv.FormatUint(uint64(x), 10))
	case uint64:
		buf.WriteString(strconv.FormatUint(x, 10))
	case float32, float64:
		return fmt.Errorf("journald: canonical JSON holds integers only, got float %v", x)
	case []any:
		buf.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, item); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		return writeObject(buf, keys, func(k string) any { return x[k] })
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		return writeObject(buf, keys, func(k string) any { return x[k] })
	default:
		return writeReflect(buf, v)
	}
	return nil
}

func writeReflect(buf *bytes.Buffer, v any) error {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			buf.WriteString("null")
			return nil
		}
		items := make([]any, rv.Len())
		for i := range items {
			items[i] = rv.Index(i).Interface()
		}
		return writeCanonical(buf, items)
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("journald: canonical JSON object keys must be strings, got %s", rv.Type().Key())
		}
		if rv.IsNil() {
			buf.WriteString("null")
			return nil
		}
		vals := make(map[string]any, rv.Len())
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			ks := k.String()
			keys = append(keys, ks)
			vals[ks] = rv.MapIndex(k).Interface()
		}
		return writeObject(buf, keys, func(k string) any { return vals[k] })
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			buf.WriteString("null")
			return nil
		}
		return writeCanonical(buf, rv.Elem().Interface())
	case reflect.String:
		return writeString(buf, rv.String())
	case reflect.Bool:
		return writeCanonical(buf, rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		buf.WriteString(strconv.FormatInt(rv.Int(), 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		buf.WriteString(strconv.FormatUint(rv.Uint(), 10))
		return nil
	}
	return fmt.Errorf("journald: %T cannot be encoded as canonical JSON", v)
}

// writeObject sorts keys by code point. For valid UTF-8, byte order is code point order
// (unlike UTF-16 order), so a plain string sort is exact.
func writeObject(buf *bytes.Buffer, keys []string, get func(string) any) error {
	sort.Strings(keys)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeString(buf, k); err != nil {
			return err
		}
		buf.WriteByte(':')
		if err := writeCanonical(buf, get(k)); err != nil {
			return err
		}
	}
	buf.WriteByte('}')
	return nil
}

const hexDigits = "0123456789abcdef"

// writeString escapes exactly what Python's json.dumps(ensure_ascii=False) escapes: the
// quote, the backslash and the C0 controls (\b \f \n \r \t short, the rest \u00xx).
func writeString(buf *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("journald: canonical JSON strings must be valid UTF-8: %q", s)
	}
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
	return nil
}

// writeIntegerText writes a JSON number that must be an integer, normalized the way
// Python prints an int (no sign on zero, no exponent).
func writeIntegerText(buf *bytes.Buffer, text string) error {
	if strings.ContainsAny(text, ".eE") {
		return fmt.Errorf("journald: canonical JSON holds integers only, got %s", text)
	}
	n, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return fmt.Errorf("journald: invalid integer %q", text)
	}
	buf.WriteString(n.String())
	return nil
}

// Genesis is the `prev` of seq 1: 64 zeros.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// checkSurrogateEscapes refuses \uD800-\uDBFF not followed by \uDC00-\uDFFF, and a
// \uDC00-\uDFFF that does not follow one.
func checkSurrogateEscapes(text []byte) error {
	surrogate := func(i int) (rune, bool) {
		if i+6 > len(text) || text[i] != '\\' || text[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(text[i+2:i+6]), 16, 32)
		if err != nil {
			return 0, false
		}
		return rune(v), true
	}
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			continue
		}
		r, ok := surrogate(i)
		if !ok {
			i++ // skip the escaped character (\\, \", ...)
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := surrogate(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return fmt.Errorf("journald: invalid JSON: lone surrogate escape at byte %d", i)
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("journald: invalid JSON: lone surrogate escape at byte %d", i)
		}
		i += 5
	}
	return nil
}
