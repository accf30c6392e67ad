import Testing
import Foundation
import CampaignTestSupport
@testable import LocalTime

/// Moments in 20 zones, DST-change days included, checked against Python's
/// `zoneinfo` reading the same tz database (computed by the test, independently).
@Suite struct LocalTimeTests {
    static let zones = [
        "America/New_York", "Europe/Berlin", "Australia/Sydney", "America/Los_Angeles", "America/Mexico_City",
        "America/Sao_Paulo", "America/St_Johns", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo",
        "Asia/Shanghai", "Australia/Lord_Howe", "Australia/Adelaide", "Pacific/Chatham", "Pacific/Auckland",
        "Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/London", "Africa/Casablanca", "America/Santiago",
    ]
    /// DST-change days (New York 2026-03-08 and 11-01, Berlin 03-29 and
    /// 10-25, Sydney 04-05 and 10-04), days around them, and dates past the
    /// last transition a fat TZif file lists (2037), where its footer rule decides.
    static let dates = ["2026-03-07", "2026-03-08", "2026-03-09", "2026-11-01", "2026-03-29", "2026-10-25", "2026-04-05",
                        "2026-10-04", "2026-12-01", "2026-06-21", "2045-03-12", "2045-11-05", "2045-03-26", "2045-10-01", "2045-04-02"]
    static let times = ["00:30", "01:30", "02:00", "02:30", "03:00", "03:30", "09:00", "12:00", "23:30"]

    @Test func momentsAgreeWithPythonZoneinfo() throws {
        let db = ZoneDatabase()
        #expect(db.isInstalled, Comment(rawValue: "tzdata must be installed (make deps)"))
        var mine: [String] = []
        var cases: [String] = []
        for zone in Self.zones {
            guard case .zone(let rules) = db.zone(named: zone) else { Issue.record("\(zone) not found in \(db.directory)"); return }
            for date in Self.dates {
                for time in Self.times {
                    let at = DeliverAt(localTime: TimeOfDay(text: time)!, date: nil, windowSeconds: 0, defaultZone: "UTC", late: .send)
                    mine.append(String(at.moment(in: rules, on: CivilDate(iso: date)!)))
                    cases.append("\(zone) \(date) \(time)")
                }
            }
        }
        let script = """
        import sys, datetime, zoneinfo
        for line in sys.stdin.read().splitlines():
            zone, date, time = line.split()
            y, m, d = map(int, date.split('-')); hh, mm = map(int, time.split(':'))
            print(int(datetime.datetime(y, m, d, hh, mm, tzinfo=zoneinfo.ZoneInfo(zone)).timestamp()))
        """
        let input = TemporaryDirectory("localtime")
        try cases.joined(separator: "\n").write(toFile: input.file("cases"), atomically: true, encoding: .utf8)
        let (status, out) = try runTool("sh", ["-c", "python3 -c \"$0\" < \"$1\"", script, input.file("cases")])
        #expect(status == 0, Comment(rawValue: out))
        let theirs = out.split(separator: "\n").map(String.init)
        #expect(theirs.count == cases.count)
        var mismatches: [String] = []
        for (i, c) in cases.enumerated() where i < theirs.count && theirs[i] != mine[i] {
            mismatches.append("\(c): ours \(mine[i]), zoneinfo \(theirs[i])")
        }
        #expect(mismatches == [], Comment(rawValue: "\(mismatches.count) of \(cases.count) differ"))
        #expect(cases.count == 20 * Self.dates.count * Self.times.count)
    }

    @Test func skippedAndRepeatedClockTimes() throws {
        guard case .zone(let ny) = ZoneDatabase().zone(named: "America/New_York") else { Issue.record("no America/New_York"); return }
        let march8 = Int64(CivilDate(year: 2026, month: 3, day: 8).daysSinceEpoch) * 86_400
        // 02:30 does not exist that night: read with EST, it is 03:30 EDT (07:30 UTC).
        #expect(ny.utc(atLocal: march8 + 9_000) == march8 + 7 * 3600 + 1800)
        let november1 = Int64(CivilDate(year: 2026, month: 11, day: 1).daysSinceEpoch) * 86_400
        // 01:30 happens twice: the first, EDT (05:30 UTC).
        #expect(ny.utc(atLocal: november1 + 5_400) == november1 + 5 * 3600 + 1800)
        #expect(ny.offset(atUTC: november1 + 5 * 3600 + 1800) == -4 * 3600)
        #expect(ny.offset(atUTC: november1 + 6 * 3600 + 1800) == -5 * 3600)
    }

    @Test func fixedOffsetsAreISO8601Signed() {
        let db = ZoneDatabase()
        func seconds(_ text: String) -> Int? {
            if case .zone(let z) = db.zone(named: text) { return z.offset(atUTC: 0) }
            return nil
        }
        #expect(seconds("+05:30") == 19_800)
        #expect(seconds("-00:01") == -60)
        #expect(seconds("UTC-3") == -10_800, Comment(rawValue: "UTC-3 is three hours behind UTC, as ISO 8601 reads it"))
        #expect(seconds("GMT+5:45") == 20_700)
        #expect(seconds("+0530") == 19_800)
        #expect(seconds("Z") == 0)
        if case .zone(let z) = db.zone(named: "-00:01") { #expect(z.name == "-00:01") } else { Issue.record("-00:01") }
        for bad in ["+25:00", "+5:75", "UTC+", "+1:2", "9am", "New York", "../../etc/passwd", "/etc/localtime", "America/.hidden", ""] {
            #expect(db.zone(named: bad) == .invalid, Comment(rawValue: bad))
        }
        for unknown in ["Mars/Olympus", "America/Springfield", "PST", "zone.tab"] {
            #expect(db.zone(named: unknown) == .unknown, Comment(rawValue: unknown))
        }
    }

    @Test func posixRulesOfSlimFiles() {
        // A zone known only by its footer, as slim TZif files give it.
        let berlin = ZoneRules(name: "x", times: [], offsets: [], initialOffset: 3600, rule: PosixRule("CET-1CEST,M3.5.0,M10.5.0/3"))
        let march29 = Int64(CivilDate(year: 2026, month: 3, day: 29).daysSinceEpoch) * 86_400
        #expect(berlin.offset(atUTC: march29 + 3599) == 3600)
        #expect(berlin.offset(atUTC: march29 + 3600) == 7200)
        let sydney = PosixRule("AEST-10AEDT,M10.1.0,M4.1.0/3")!
        #expect(sydney.standardOffset == 36_000)
        #expect(sydney.daylight?.offset == 39_600)
        #expect(PosixRule("<+0330>-3:30") != nil)
        #expect(PosixRule("CET-1CEST,M13.5.0,M10.5.0") == nil)
        #expect(CivilDate(daysSinceEpoch: CivilDate(year: 2024, month: 2, day: 29).daysSinceEpoch) == CivilDate(year: 2024, month: 2, day: 29))
        #expect(CivilDate(year: 2026, month: 11, day: 26).weekday == 4)
    }

    @Test func defaultDateIsTheFirstStillToComeWhereClocksAreAhead() {
        let tokyo = ZoneRules(name: "+09:00", fixedOffset: 9 * 3600), ny = ZoneRules(name: "-05:00", fixedOffset: -5 * 3600)
        let at = DeliverAt(localTime: TimeOfDay(text: "09:00")!, date: nil, windowSeconds: 0, defaultZone: "UTC", late: .send)
        // 2026-11-26 03:15 UTC: 12:15 in Tokyo (09:00 passed), 22:15 the day before in New York.
        let now = Int64(CivilDate(year: 2026, month: 11, day: 26).daysSinceEpoch) * 86_400 + 3 * 3600 + 900
        #expect(at.defaultDate(zones: [tokyo, ny], now: now) == CivilDate(year: 2026, month: 11, day: 27))
        #expect(at.defaultDate(zones: [ny], now: now) == CivilDate(year: 2026, month: 11, day: 26))
    }

    @Test func quietHoursRunOverMidnight() {
        let q = QuietHours(from: TimeOfDay(text: "21:00")!, to: TimeOfDay(text: "08:00")!, defaultZone: "UTC")
        #expect(q.contains(secondOfDay: 22 * 3600))
        #expect(q.contains(secondOfDay: 7 * 3600 + 3599))
        #expect(!q.contains(secondOfDay: 8 * 3600))
        #expect(!q.contains(secondOfDay: 20 * 3600 + 3599))
        let berlin = ZoneRules(name: "+01:00", fixedOffset: 3600)
        let day = Int64(CivilDate(year: 2026, month: 12, day: 1).daysSinceEpoch) * 86_400
        // 21:30 UTC is 22:30 in Berlin: it may go at 08:00 Berlin, 07:00 UTC the next day.
        #expect(q.nextAllowed(in: berlin, atOrAfter: day + 21 * 3600 + 1800) == day + 86_400 + 7 * 3600)
        #expect(q.nextAllowed(in: berlin, atOrAfter: day + 12 * 3600) == day + 12 * 3600)
    }
}
