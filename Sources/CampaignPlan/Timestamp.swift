import CampaignIO

/// Parses `registered_at`: UNIX seconds (a fraction is dropped) or
/// milliseconds (a number above 10^11, as JavaScript's `Date.now()` and many
/// exports give it), or ISO 8601 such as `2024-05-01T12:00:00Z`,
/// `2024-05-01T12:00:00.250+02:00`, `2024-05-01 12:00:00` (UTC) or
/// `2024-05-01` (midnight UTC).
public enum Timestamp {
    /// Numbers above this are milliseconds: as seconds they would be after
    /// the year 5000, and 10^11 ms is only 1973.
    static let millisecondsAbove: Int64 = 100_000_000_000

    public static func parse(_ text: String) -> Int64? {
        let t = String(text.trimmingWhitespace())
        if let n = Int64(t) { return n > millisecondsAbove ? n / 1000 : n }
        if let d = Double(t), d.isFinite, t.allSatisfy({ $0.isNumber || $0 == "." || $0 == "-" }) {
            let seconds = d > Double(millisecondsAbove) ? d / 1000 : d
            return Int64(exactly: seconds.rounded(.down))   // nil, not a trap, when out of range
        }
        return iso8601(t)
    }

    static func iso8601(_ t: String) -> Int64? {
        let c = Array(t.utf8)
        func digits(_ at: Int, _ n: Int) -> Int? {
            guard at + n <= c.count else { return nil }
            var v = 0
            for i in at..<(at + n) {
                guard c[i] >= 0x30, c[i] <= 0x39 else { return nil }
                v = v * 10 + Int(c[i] - 0x30)
            }
            return v
        }
        guard let year = digits(0, 4), c.count >= 10, c[4] == UInt8(ascii: "-"), let month = digits(5, 2),
              c[7] == UInt8(ascii: "-"), let day = digits(8, 2), (1...12).contains(month), (1...31).contains(day) else { return nil }
        var seconds = 0
        var p = 10
        if p < c.count {
            guard c[p] == UInt8(ascii: "T") || c[p] == UInt8(ascii: " "), let h = digits(p + 1, 2), c.count > p + 3,
                  c[p + 3] == UInt8(ascii: ":"), let m = digits(p + 4, 2), h < 24, m < 60 else { return nil }
            seconds = h * 3600 + m * 60
            p += 6
            if p < c.count, c[p] == UInt8(ascii: ":") {
                guard let s = digits(p + 1, 2), s <= 60 else { return nil }
                seconds += s
                p += 3
            }
            if p < c.count, c[p] == UInt8(ascii: ".") || c[p] == UInt8(ascii: ",") {
                p += 1
                while p < c.count, c[p] >= 0x30, c[p] <= 0x39 { p += 1 }
            }
            if p < c.count {
                switch c[p] {
                case UInt8(ascii: "Z"), UInt8(ascii: "z"): p += 1
                case UInt8(ascii: "+"), UInt8(ascii: "-"):
                    let sign = c[p] == UInt8(ascii: "+") ? 1 : -1
                    guard let oh = digits(p + 1, 2) else { return nil }
                    var q = p + 3
                    if q < c.count, c[q] == UInt8(ascii: ":") { q += 1 }
                    guard let om = digits(q, 2) else { return nil }
                    seconds -= sign * (oh * 3600 + om * 60)
                    p = q + 2
                default: return nil
                }
            }
            guard p == c.count else { return nil }
        }
        return Int64(daysFromCivil(year, month, day)) * 86_400 + Int64(seconds)
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm).
    static func daysFromCivil(_ y0: Int, _ m: Int, _ d: Int) -> Int {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
