package dlp

// The digit detectors (cards, SSNs) work on digit runs rather than regular
// expressions: a run is a maximal sequence of ASCII digit groups joined by
// single separators, and the detectors pick windows of whole groups from
// it. That keeps "4111 1111 1111 1111 and 4111 1111 1111 1111" two cards,
// and a 30-digit order number none.

type group struct{ start, end int } // byte offsets of the digits

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isAlnum(c byte) bool { return isDigit(c) || isAlpha(c) }

// isCardSep: separators people type between card digit groups.
func isCardSep(c byte) bool { return c == ' ' || c == '-' || c == '.' }

func (s *scanner) digitRuns() {
	t := s.text
	var groups []group
	for i := 0; i < len(t); {
		if !isDigit(t[i]) {
			i++
			continue
		}
		// A run glued to a letter on the left (an IBAN's "DE89 …", a hex
		// hash, "v1.2") is part of a word, not a number.
		// So is one joined to a word by a dash ("xoxb-1234…", "id-4111…").
		glued := i > 0 && (isAlpha(t[i-1]) || t[i-1] == '_' || (t[i-1] == '-' && i > 1 && isAlnum(t[i-2])))
		groups = groups[:0]
		j := i
		for {
			k := j
			for k < len(t) && isDigit(t[k]) {
				k++
			}
			groups = append(groups, group{j, k})
			if k+1 < len(t) && isCardSep(t[k]) && isDigit(t[k+1]) {
				j = k + 1
				continue
			}
			j = k
			break
		}
		glued = glued || (j < len(t) && (isAlpha(t[j]) || t[j] == '_' || (t[j] == '-' && j+1 < len(t) && isAlpha(t[j+1]))))
		if !glued {
			s.cards(groups)
			s.ssn(groups)
		}
		i = j
	}
}

// cards finds, left to right, the longest window of whole groups with 13–19
// digits, one kind of separator, a card network's IIN prefix and length,
// and a valid Luhn check digit.
func (s *scanner) cards(gs []group) {
	var digits [19]byte
	for i := 0; i < len(gs); {
		best := -1
		n := 0
		for j := i; j < len(gs); j++ {
			if j > i && (s.text[gs[j].start-1] != s.text[gs[i+1].start-1]) {
				break // mixed separators
			}
			w := gs[j].end - gs[j].start
			if n+w > 19 {
				break
			}
			copy(digits[n:], s.text[gs[j].start:gs[j].end])
			n += w
			if n >= 13 && luhn(digits[:n]) && cardIIN(digits[:n]) {
				best = j
			}
		}
		if best < 0 {
			i++
			continue
		}
		s.add(PaymentCard, gs[i].start, gs[best].end)
		i = best + 1
	}
}

func luhn(d []byte) bool {
	sum := 0
	double := false
	for i := len(d) - 1; i >= 0; i-- {
		v := int(d[i] - '0')
		if double {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
		double = !double
	}
	return sum%10 == 0
}

// prefix reads the first k digits as a number.
func prefix(d []byte, k int) int {
	v := 0
	for _, c := range d[:k] {
		v = v*10 + int(c-'0')
	}
	return v
}

// cardIIN accepts the issuer prefixes and lengths of the networks in
// docs/policy.md: Visa, Mastercard, American Express, Discover, JCB,
// UnionPay and Diners Club. Other numbers that pass Luhn (IMEIs, most
// 13–19 digit ids) do not match.
func cardIIN(d []byte) bool {
	n := len(d)
	p1, p2, p3, p4, p6 := prefix(d, 1), prefix(d, 2), prefix(d, 3), prefix(d, 4), prefix(d, 6)
	switch {
	case p1 == 4: // Visa
		return n == 13 || n == 16 || n == 19
	case p2 >= 51 && p2 <= 55, p4 >= 2221 && p4 <= 2720: // Mastercard
		return n == 16
	case p2 == 34 || p2 == 37: // American Express
		return n == 15
	case p4 == 6011, p3 >= 644 && p3 <= 649, p2 == 65, p6 >= 622126 && p6 <= 622925: // Discover
		return n >= 16 && n <= 19
	case p4 >= 3528 && p4 <= 3589: // JCB
		return n >= 16 && n <= 19
	case p2 == 62: // UnionPay
		return n >= 16 && n <= 19
	case p2 == 36: // Diners Club International
		return n >= 14 && n <= 19
	case p3 >= 300 && p3 <= 305, p2 == 38 || p2 == 39: // Diners Club
		return n >= 16 && n <= 19
	}
	return false
}

// ssn accepts a run that is exactly AAA-GG-SSSS or AAA GG SSSS (one
// separator kind) with a valid area (not 000, 666 or 900–999), group (not
// 00) and serial (not 0000). Nine bare digits are not taken: zip+4 codes,
// order and account numbers look the same, and docs/policy.md says so.
func (s *scanner) ssn(gs []group) {
	if len(gs) != 3 {
		return
	}
	t := s.text
	if gs[0].end-gs[0].start != 3 || gs[1].end-gs[1].start != 2 || gs[2].end-gs[2].start != 4 {
		return
	}
	sep := t[gs[0].end]
	if (sep != '-' && sep != ' ') || t[gs[1].end] != sep {
		return
	}
	area := prefix([]byte(t[gs[0].start:gs[0].end]), 3)
	grp := prefix([]byte(t[gs[1].start:gs[1].end]), 2)
	serial := prefix([]byte(t[gs[2].start:gs[2].end]), 4)
	if area == 0 || area == 666 || area >= 900 || grp == 0 || serial == 0 {
		return
	}
	s.add(USSSN, gs[0].start, gs[2].end)
}

// ibanLengths is the IBAN length of each country in the SWIFT IBAN
// registry (release 2024), which is what the length check uses.
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
	"BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
	"DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
	"GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
	"IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
	"LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
	"MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
	"PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
	"SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
	"TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 0x20
	}
	return c
}

// iban finds a country code and two check digits at a word start, then
// exactly the country's length of letters and digits, either contiguous or
// printed in groups of four separated by single spaces, not followed by
// another letter or digit, with a valid ISO 7064 mod-97 checksum. Letters
// are taken in either case.
func (s *scanner) iban() {
	t := s.text
	var buf [34]byte
	for i := 0; i+4 <= len(t); i++ {
		if !isAlpha(t[i]) || !isAlpha(t[i+1]) || !isDigit(t[i+2]) || !isDigit(t[i+3]) {
			continue
		}
		if i > 0 && isAlnum(t[i-1]) {
			continue
		}
		want, ok := ibanLengths[string([]byte{upper(t[i]), upper(t[i+1])})]
		if !ok {
			continue
		}
		n, j := 0, i
		for n < want && j < len(t) {
			c := t[j]
			switch {
			case isAlnum(c):
				buf[n] = upper(c)
				n++
				j++
			case c == ' ' && n%4 == 0 && n > 0 && j+1 < len(t) && isAlnum(t[j+1]) && t[j-1] != ' ':
				j++
			default:
				want = -1 // stop: too short
			}
		}
		if n != want || (j < len(t) && isAlnum(t[j])) {
			continue
		}
		if mod97(buf[:n]) == 1 {
			s.add(IBAN, i, j)
			i = j - 1
		}
	}
}

// mod97 is the ISO 7064 MOD 97-10 remainder of the IBAN with its first four
// characters moved to the end and letters read as 10–35.
func mod97(b []byte) int {
	r := 0
	step := func(c byte) {
		if isDigit(c) {
			r = (r*10 + int(c-'0')) % 97
		} else {
			r = (r*100 + int(c-'A'+10)) % 97
		}
	}
	for _, c := range b[4:] {
		step(c)
	}
	for _, c := range b[:4] {
		step(c)
	}
	return r
}
