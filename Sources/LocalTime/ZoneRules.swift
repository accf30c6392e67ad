/// How one time zone's clock relates to UTC over time: the transitions a
/// TZif file lists and, after the last of them, its POSIX TZ rule; or one
/// fixed offset. Pure: built from bytes, never reads a file.
public struct ZoneRules: Sendable, Equatable {
    /// The name the zone was found by (`Europe/Berlin`, `+05:30`).
    public let name: String
    /// UTC instants (UNIX seconds) where the offset changes, ascending.
    let times: [Int64]
    /// The offset east of UTC in seconds in effect from `times[i]`.
    let offsets: [Int32]
    /// The offset before the first transition.
    let initialOffset: Int32
    /// After the last transition: the footer's rule (nil: the last offset stays).
    let rule: PosixRule?

    /// A zone that is always `secondsEast` ahead of UTC.
    public init(name: String, fixedOffset secondsEast: Int) {
        self.name = name
        times = []
        offsets = []
        initialOffset = Int32(secondsEast)
        rule = nil
    }

    init(name: String, times: [Int64], offsets: [Int32], initialOffset: Int32, rule: PosixRule?) {
        (self.name, self.times, self.offsets, self.initialOffset, self.rule) = (name, times, offsets, initialOffset, rule)
    }

    /// Seconds east of UTC at the instant `utc`.
    public func offset(atUTC utc: Int64) -> Int {
        if let rule, times.isEmpty || utc >= times[times.count - 1] { return Int(rule.offset(atUTC: utc)) }
        // The last transition at or before `utc`.
        var lo = 0, hi = times.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if times[mid] <= utc { lo = mid + 1 } else { hi = mid }
        }
        return Int(lo == 0 ? initialOffset : offsets[lo - 1])
    }

    /// The wall clock at the instant `utc`, as seconds since 1970-01-01T00:00 local.
    public func local(atUTC utc: Int64) -> Int64 { utc + Int64(offset(atUTC: utc)) }

    /// The instant at which the wall clock reads `local` (seconds since
    /// 1970-01-01T00:00 local), read as Python's `zoneinfo` reads a time
    /// with fold 0: a time skipped by a change (02:30 on a spring-forward
    /// night) is taken with the offset before the change (so it lands one
    /// hour later on the clock, 03:30); a time that happens twice (01:30 on
    /// a fall-back night) is the first of the two.
    public func utc(atLocal local: Int64) -> Int64 {
        // Offsets lie within a day of UTC: a transition further than two days
        // from `local` cannot decide it.
        let from = local - 2 * 86_400, to = local + 2 * 86_400
        var offset = Int64(self.offset(atUTC: from))
        for (time, after) in transitions(after: from, through: to) {
            let before = offset
            // zoneinfo's wall-clock time of a transition for fold 0: the
            // instant read with the larger of the two offsets.
            if time + max(before, Int64(after)) <= local { offset = Int64(after) } else { break }
        }
        return local - offset
    }

    /// Transitions (instant, offset after) in (`from`, `through`], the rule's included.
    func transitions(after from: Int64, through to: Int64) -> [(Int64, Int32)] {
        var out: [(Int64, Int32)] = []
        for (i, t) in times.enumerated() where t > from && t <= to { out.append((t, offsets[i])) }
        if let rule, (times.last ?? .min) < to {
            let floor = max(from, times.last ?? .min)
            let firstYear = CivilDate(daysSinceEpoch: Int(floorDivide(floor, 86_400))).year - 1
            let lastYear = CivilDate(daysSinceEpoch: Int(floorDivide(to, 86_400))).year + 1
            var generated: [(Int64, Int32)] = []
            for year in firstYear...lastYear { generated += rule.transitions(year: year) }
            generated.sort { $0.0 < $1.0 }
            out += generated.filter { $0.0 > floor && $0.0 <= to }
        }
        return out
    }
}

func floorDivide(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

/// The POSIX TZ string a TZif file ends with (RFC 8536 §3.3), which gives
/// the offsets after its last transition: `CET-1CEST,M3.5.0,M10.5.0/3`.
struct PosixRule: Sendable, Equatable {
    /// Seconds east of UTC (POSIX writes the opposite sign).
    var standardOffset: Int32
    var daylight: Daylight?

    struct Daylight: Sendable, Equatable {
        var offset: Int32
        var start: DateRule, startTime: Int32
        var end: DateRule, endTime: Int32
    }

    enum DateRule: Sendable, Equatable {
        /// `Jn`: day n of 1…365, February 29th never counted.
        case julianNoLeap(Int)
        /// `n`: day n of 0…365, February 29th counted.
        case zeroBased(Int)
        /// `Mm.w.d`: weekday d (0 Sunday) of week w (5: the last) of month m.
        case monthWeekDay(month: Int, week: Int, weekday: Int)

        func date(in year: Int) -> CivilDate {
            switch self {
            case .julianNoLeap(let n):
                var d = n
                if CivilDate.isLeap(year), n >= 60 { d += 1 }
                return CivilDate(year: year, month: 1, day: 1).adding(days: d - 1)
            case .zeroBased(let n):
                return CivilDate(year: year, month: 1, day: 1).adding(days: n)
            case .monthWeekDay(let m, let w, let wd):
                let first = CivilDate(year: year, month: m, day: 1)
                var day = 1 + (wd - first.weekday + 7) % 7 + (w - 1) * 7
                let length = CivilDate.daysIn(month: m, year: year)
                while day > length { day -= 7 }
                return CivilDate(year: year, month: m, day: day)
            }
        }
    }

    /// The two changes of `year`: to daylight time and back.
    func transitions(year: Int) -> [(Int64, Int32)] {
        guard let d = daylight else { return [] }
        let start = Int64(d.start.date(in: year).daysSinceEpoch) * 86_400 + Int64(d.startTime) - Int64(standardOffset)
        let end = Int64(d.end.date(in: year).daysSinceEpoch) * 86_400 + Int64(d.endTime) - Int64(d.offset)
        return [(start, d.offset), (end, standardOffset)]
    }

    func offset(atUTC utc: Int64) -> Int32 {
        guard daylight != nil else { return standardOffset }
        let year = CivilDate(daysSinceEpoch: Int(floorDivide(utc, 86_400))).year
        var changes: [(Int64, Int32)] = []
        for y in (year - 1)...year { changes += transitions(year: y) }
        changes.sort { $0.0 < $1.0 }
        return changes.last { $0.0 <= utc }?.1 ?? standardOffset
    }

    /// Parses a POSIX TZ string; nil when it is not one (or empty).
    init?(_ text: String) {
        var s = Substring(text)
        func name() -> Bool {
            if s.first == "<" {
                guard let close = s.firstIndex(of: ">") else { return false }
                s = s[s.index(after: close)...]
                return true
            }
            let letters = s.prefix { $0.isLetter }
            guard letters.count >= 3 else { return false }
            s = s.dropFirst(letters.count)
            return true
        }
        // [+-]hh[:mm[:ss]], hours up to 167 (RFC 8536's extension for times).
        func clock() -> Int32? {
            var sign: Int32 = 1
            if s.first == "+" { s = s.dropFirst() } else if s.first == "-" { sign = -1; s = s.dropFirst() }
            var fields: [Int32] = []
            while fields.count < 3 {
                let digits = s.prefix { $0.isASCII && $0.isNumber }
                guard !digits.isEmpty, digits.count <= 3, let v = Int32(digits) else { return nil }
                fields.append(v)
                s = s.dropFirst(digits.count)
                guard s.first == ":" else { break }
                s = s.dropFirst()
            }
            guard let h = fields.first, h <= 167 else { return nil }
            let m = fields.count > 1 ? fields[1] : 0, sec = fields.count > 2 ? fields[2] : 0
            guard m < 60, sec < 60 else { return nil }
            return sign * (h * 3600 + m * 60 + sec)
        }
        func number() -> Int? {
            let digits = s.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty else { return nil }
            s = s.dropFirst(digits.count)
            return Int(digits)
        }
        func dateRule() -> (DateRule, Int32)? {
            let rule: DateRule
            if s.first == "J" {
                s = s.dropFirst()
                guard let n = number(), (1...365).contains(n) else { return nil }
                rule = .julianNoLeap(n)
            } else if s.first == "M" {
                s = s.dropFirst()
                guard let m = number(), (1...12).contains(m), s.first == "." else { return nil }
                s = s.dropFirst()
                guard let w = number(), (1...5).contains(w), s.first == "." else { return nil }
                s = s.dropFirst()
                guard let d = number(), (0...6).contains(d) else { return nil }
                rule = .monthWeekDay(month: m, week: w, weekday: d)
            } else {
                guard let n = number(), (0...365).contains(n) else { return nil }
                rule = .zeroBased(n)
            }
            var time: Int32 = 7200
            if s.first == "/" {
                s = s.dropFirst()
                guard let t = clock() else { return nil }
                time = t
            }
            return (rule, time)
        }
        guard name(), let std = clock() else { return nil }
        standardOffset = -std
        guard !s.isEmpty else { daylight = nil; return }
        guard name() else { return nil }
        var dstOffset = -std + 3600
        if let first = s.first, first != "," {
            guard let d = clock() else { return nil }
            dstOffset = -d
        }
        guard s.first == "," else { return nil }
        s = s.dropFirst()
        guard let (start, startTime) = dateRule(), s.first == "," else { return nil }
        s = s.dropFirst()
        guard let (end, endTime) = dateRule(), s.isEmpty else { return nil }
        daylight = Daylight(offset: dstOffset, start: start, startTime: startTime, end: end, endTime: endTime)
    }
}

/// Why bytes are not a TZif file.
public struct ZoneFileError: Error, Equatable, Sendable {
    public var reason: String
}

extension ZoneRules {
    /// Reads a TZif file (RFC 8536, versions 1 to 4): the 64-bit data of
    /// version 2 and later when present, and its footer rule.
    public init(name: String, tzif bytes: [UInt8]) throws(ZoneFileError) {
        var p = 0
        func u32(_ at: Int) -> Int { Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3]) }
        func header() throws(ZoneFileError) -> (version: UInt8, isut: Int, isstd: Int, leap: Int, time: Int, type: Int, chars: Int) {
            guard bytes.count >= p + 44, bytes[p..<(p + 4)].elementsEqual("TZif".utf8) else { throw ZoneFileError(reason: "not a TZif file") }
            let c = (4...9).map { u32(p + 20 + ($0 - 4) * 4) }
            let version = bytes[p + 4]
            p += 44
            return (version, c[0], c[1], c[2], c[3], c[4], c[5])
        }
        func block(_ h: (version: UInt8, isut: Int, isstd: Int, leap: Int, time: Int, type: Int, chars: Int), wide: Bool) -> Int {
            let t = wide ? 8 : 4
            return h.time * t + h.time + h.type * 6 + h.chars + h.leap * (t + 4) + h.isstd + h.isut
        }
        var h = try header()
        var wide = false
        if h.version >= UInt8(ascii: "2") {
            p += block(h, wide: false)
            h = try header()
            wide = true
        }
        guard h.type >= 1, bytes.count >= p + block(h, wide: wide) else { throw ZoneFileError(reason: "cut short") }
        let t = wide ? 8 : 4
        var times: [Int64] = []
        for i in 0..<h.time {
            let at = p + i * t
            var v: Int64 = 0
            for k in 0..<t { v = v << 8 | Int64(bytes[at + k]) }
            if !wide { v = Int64(Int32(truncatingIfNeeded: v)) }
            times.append(v)
        }
        let typeIndexes = Array(bytes[(p + h.time * t)..<(p + h.time * t + h.time)])
        let typesStart = p + h.time * t + h.time
        var typeOffsets: [Int32] = []
        for i in 0..<h.type { typeOffsets.append(Int32(bitPattern: UInt32(u32(typesStart + i * 6)))) }
        guard typeIndexes.allSatisfy({ Int($0) < h.type }) else { throw ZoneFileError(reason: "a transition names a missing type") }
        p += block(h, wide: wide)
        var rule: PosixRule? = nil
        if wide, p < bytes.count, bytes[p] == 0x0A, let end = bytes[(p + 1)...].firstIndex(of: 0x0A), end > p + 1 {
            rule = PosixRule(String(decoding: bytes[(p + 1)..<end], as: UTF8.self))
        }
        self.init(name: name, times: times, offsets: typeIndexes.map { typeOffsets[Int($0)] },
                  initialOffset: typeOffsets[0], rule: rule)
    }
}
