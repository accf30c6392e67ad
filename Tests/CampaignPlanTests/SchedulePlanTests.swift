import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import LocalTime
@testable import CampaignPlan
@testable import PlanStream

/// Scheduled jobs: each device's moment from its own zone, in plan order of
/// moment; unknown zones defaulted and counted, invalid ones rejected.
@Suite struct SchedulePlanTests {
    static func job(_ schedule: String) -> String {
        #"{"campaign":"morning","format":"h2","topic":"com.example.campaign",\#(schedule),"messages":{"en":{"alert":"Good morning"}}}"#
    }

    static func audience(_ zones: [String], header: String = "token,lang,tz") -> String {
        ([header] + zones.enumerated().map { "\(tokenHex($0.offset + 1)),en,\($0.element)" }).joined(separator: "\n")
    }

    /// The zone each planned record came from, by its token.
    static func zone(of record: PlanRecord, _ zones: [String]) -> String {
        let hex = record.token.map { String(format: "%02x", $0) }.joined()
        return zones[(1...zones.count).first { tokenHex($0) == hex }! - 1]
    }

    @Test func nowIsEachRecordsMomentInAScheduledPlan() throws {
        // A Live Activity's timestamp, or "sent at {now}", written hours
        // before the notification goes must say when it goes.
        let zones = ["America/New_York", "Asia/Tokyo", "UTC"]
        let job = #"{"campaign":"morning","format":"h2","topic":"com.example.campaign","custom":{"sent":"{now:int}"},"#
            + #""deliverAt":{"localTime":"09:00","date":"2099-06-01","defaultTimeZone":"UTC"},"messages":{"en":{"alert":"at {now}"}}}"#
        let run = try PlanRun(job: job, audience: Self.audience(zones))
        #expect(run.records.count == 3)
        for record in run.records {
            let payload = try JSONValue.parse(String(decoding: record.payload, as: UTF8.self))
            #expect(payload["sent"]?.integerValue == record.at, "\(String(decoding: record.payload, as: UTF8.self))")
            #expect(payload["aps"]?["alert"]?.stringValue == "at \(record.at!)")
        }
        #expect(Set(run.records.map(\.at)).count == 3, "each its own moment")
    }

    @Test func momentsOnADaylightSavingDayAgreeWithZoneinfoAndComeInOrder() throws {
        let zones = ["America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata", "America/St_Johns", "+05:45", "UTC-3"]
        // 2026-03-08: New York springs forward at 02:00; 02:30 does not exist there.
        let run = try PlanRun(job: Self.job(#""deliverAt":{"localTime":"02:30","date":"2026-03-08","defaultTimeZone":"UTC"}"#),
                              audience: Self.audience(zones))
        #expect(run.summary.rejectedTotal == 0)
        #expect(run.records.count == zones.count)
        let moments = run.records.map { $0.at! }
        #expect(moments == moments.sorted(), "the plan is in order of moment")
        let script = """
        import sys, datetime, zoneinfo
        for z in sys.argv[1:]:
            if z[0] in '+-U':
                s = z.replace('UTC', ''); sign = -1 if s[0] == '-' else 1; hh, mm = (s[1:].split(':') + ['0'])[:2]
                tz = datetime.timezone(sign * datetime.timedelta(hours=int(hh), minutes=int(mm)))
            else:
                tz = zoneinfo.ZoneInfo(z)
            print(int(datetime.datetime(2026, 3, 8, 2, 30, tzinfo=tz).timestamp()))
        """
        let (status, out) = try runTool("python3", ["-c", script] + zones)
        #expect(status == 0, "\(out)")
        let expected = Dictionary(uniqueKeysWithValues: zip(zones, out.split(separator: "\n").map { Int64($0)! }))
        for record in run.records {
            let zone = Self.zone(of: record, zones)
            #expect(record.at == expected[zone], "\(zone)")
        }
        #expect(run.reader.header.schedule == .deliverAt(DeliverAt(localTime: TimeOfDay(text: "02:30")!, date: CivilDate(iso: "2026-03-08"),
                                                                  windowSeconds: 10_800, defaultZone: "UTC", late: .send)))
        #expect(run.summary.schedule?.perHour.values.reduce(0, +) == zones.count)
    }

    @Test func unknownAndEmptyZonesTakeTheDefaultAndInvalidOnesAreRejectedByValue() throws {
        let zones = ["Europe/Berlin", "Mars/Olympus", "", "+25:00", "New York", "Asia/Tokyo"]
        let run = try PlanRun(job: Self.job(#""deliverAt":{"localTime":"09:00","date":"2026-12-01","defaultTimeZone":"America/New_York"}"#),
                              audience: Self.audience(zones))
        #expect(run.records.count == 4)
        #expect(run.summary.schedule?.defaultedTimeZone == 2)
        #expect(run.summary.rejected[.invalidTimeZone] == 2)
        #expect(run.reject(line: 5).code == "invalid_timezone")
        #expect(run.reject(line: 5).reason?.contains("\"+25:00\"") == true)
        #expect(run.reject(line: 6).reason?.contains("\"New York\"") == true)
        // Tokyo first (00:00 UTC), Berlin (08:00 UTC), the two defaulted to New York (14:00 UTC).
        let ny = CivilDate(year: 2026, month: 12, day: 1).daysSinceEpoch * 86_400 + 14 * 3600
        #expect(run.records.map { Self.zone(of: $0, zones) } == ["Asia/Tokyo", "Europe/Berlin", "Mars/Olympus", ""])
        #expect(run.records.last?.at == Int64(ny))
        #expect(run.summary.schedule?.perHour == [Int64(ny - 14 * 3600): 1, Int64(ny - 6 * 3600): 1, Int64(ny): 2])
        let json = String(decoding: run.summary.json.serialized(), as: UTF8.self)
        #expect(json.contains(#""defaulted_timezone":2"#))
        #expect(json.contains(#""2026-12-01T14:00:00Z":2"#))
    }

    @Test func zoneNamesInAnotherCaseAreTheirZonesNotTheDefault() throws {
        let job = Self.job(#""deliverAt":{"localTime":"09:00","date":"2026-12-01","defaultTimeZone":"asia/tokyo"}"#)
        let given = ["america/new_york", "utc", "EUROPE/BERLIN"], canonical = ["America/New_York", "UTC", "Europe/Berlin"]
        let run = try PlanRun(job: job, audience: Self.audience(given))
        let exact = try PlanRun(job: job, audience: Self.audience(canonical))
        #expect((run.summary.schedule?.defaultedTimeZone ?? 0) == 0, "none fell back to the default zone")
        #expect(run.records.map(\.at) == exact.records.map(\.at))
        #expect(Set(run.records.compactMap(\.at)).count == 3, "three zones, three moments")
        guard case .deliverAt(let d)? = run.reader.header.schedule else { Issue.record("no deliverAt"); return }
        #expect(d.defaultZone == "Asia/Tokyo", "the job's default zone under the database's name")
    }

    @Test func theDefaultDateIsTheFirstOnWhichNoDevicesMomentHasPassed() throws {
        // Plan time 2026-11-26 03:15 UTC: 12:15 in Tokyo, so 09:00 is tomorrow there; New York's today is the 25th, evening.
        let now = UInt32(CivilDate(year: 2026, month: 11, day: 26).daysSinceEpoch * 86_400 + 3 * 3600 + 900)
        let run = try PlanRun(job: Self.job(#""deliverAt":{"localTime":"09:00","defaultTimeZone":"UTC"}"#),
                              audience: Self.audience(["Asia/Tokyo", "America/New_York"]), now: now)
        #expect(run.summary.schedule?.date == "2026-11-27")
        #expect(run.records.allSatisfy { $0.at! > Int64(now) })
        let nyOnly = try PlanRun(job: Self.job(#""deliverAt":{"localTime":"09:00","defaultTimeZone":"UTC"}"#),
                                 audience: Self.audience(["America/New_York"]), now: now)
        #expect(nyOnly.summary.schedule?.date == "2026-11-26")
    }

    @Test func aMappedZoneColumnAndQuietHoursCarryTheZone() throws {
        // 2023-11-14 22:13:20 UTC: inside 21:00–08:00 in Berlin (23:13), outside in New York (17:13).
        let zones = ["Europe/Berlin", "America/New_York"]
        let run = try PlanRun(job: Self.job(#""quietHours":{"from":"21:00","to":"08:00","defaultTimeZone":"UTC"},"columns":{"tz":"zone"}"#),
                              audience: Self.audience(zones, header: "token,lang,zone"))
        #expect(run.records.map { Self.zone(of: $0, zones) } == ["America/New_York", "Europe/Berlin"])
        #expect(run.records[0].at == 1_700_000_000, "outside its quiet hours: at once")
        // 08:00 in Berlin (UTC+1) on the 15th: 07:00 UTC.
        #expect(run.records[1].at == Int64(CivilDate(year: 2023, month: 11, day: 15).daysSinceEpoch * 86_400 + 7 * 3600))
        #expect(run.records.map(\.timeZone) == ["America/New_York", "Europe/Berlin"])
    }

    @Test func partsEachHoldTheirShardsInOrderOfMoment() throws {
        let zones = (0..<40).map { ["Asia/Tokyo", "Europe/Berlin", "America/Los_Angeles", "+05:30"][$0 % 4] }
        let run = try PlanRun(job: Self.job(#""deliverAt":{"localTime":"09:00","date":"2026-12-01"}"#),
                              audience: Self.audience(zones), shards: 8, parts: 2)
        #expect(run.records.count == 40)
        // The records of both parts, read one part after the other: each part is ordered by itself.
        let firstPart = run.records.prefix { $0.shard % 2 == 0 }
        #expect(firstPart.map { $0.at! } == firstPart.map { $0.at! }.sorted())
    }

    @Test func scheduleKeysAreChecked() throws {
        for (schedule, words) in [
            (#""deliverAt":{"localTime":"9am"}"#, "is not a time of day"),
            (#""deliverAt":{"localTime":"09:00","late":"maybe"}"#, "\"send\" or \"skip\""),
            (#""deliverAt":{"localTime":"09:00","window":"3 hours"}"#, "is not a duration"),
            (#""deliverAt":{"localTime":"09:00","defaultTimeZone":"Mars/Olympus"}"#, "is not a time zone"),
            (#""deliverAt":{"localTime":"09:00","date":"2026-02-30"}"#, "is not a date"),
            (#""quietHours":{"from":"21:00","to":"21:00"}"#, "empty"),
            (#""quietHours":{"from":"21:00","to":"08:00"},"deliverAt":{"localTime":"09:00"}"#, "cannot go together"),
        ] {
            #expect(throws: (any Error).self) { try PlanRun(job: Self.job(schedule), audience: Self.audience(["UTC"])) }
            do { _ = try PlanRun(job: Self.job(schedule), audience: Self.audience(["UTC"])) } catch {
                #expect("\(error)".contains(words), "\(schedule): \(error)")
            }
        }
    }
}
