import Foundation
import Testing
import CampaignTestSupport
import LocalTime

/// A zone named in another case than the tz database's is that zone, under
/// its canonical name, not the job's default.
@Suite struct ZoneNameCaseTests {
    @Test(arguments: [("america/new_york", "America/New_York"), ("AMERICA/NEW_YORK", "America/New_York"), ("utc", "UTC"),
                      ("Utc", "UTC"), ("europe/berlin", "Europe/Berlin"), ("asia/kolkata", "Asia/Kolkata"),
                      ("America/New_York", "America/New_York")])
    func aNameInAnotherCaseIsTheCanonicalZone(_ given: String, _ canonical: String) throws {
        let db = ZoneDatabase()
        try #require(db.isInstalled, "tzdata must be installed (make deps)")
        guard case .zone(let rules) = db.zone(named: given) else {
            Issue.record("\(given) was not found as \(canonical)")
            return
        }
        #expect(rules.name == canonical)
        guard case .zone(let exact) = db.zone(named: canonical) else { Issue.record("no \(canonical)"); return }
        #expect(rules == exact, "\(given) reads the same rules as \(canonical)")
    }

    @Test func namesNoCaseMatchesStayUnknown() {
        let db = ZoneDatabase()
        for unknown in ["mars/olympus", "america/springfield", "ZONE.TAB", "pst"] {
            #expect(db.zone(named: unknown) == .unknown, "\(unknown)")
        }
    }

    /// A database of its own (as `$TZDIR` gives one): the case-insensitive
    /// index is built from its names, and a name of another case is read
    /// from the file under the canonical name.
    @Test func theIndexIsBuiltFromTheDatabasesOwnNames() throws {
        let system = ZoneDatabase()
        try #require(system.isInstalled, "tzdata must be installed (make deps)")
        let dir = TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir.file("Area/Sub_Zone"), withIntermediateDirectories: true)
        let tzif = try Data(contentsOf: URL(fileURLWithPath: system.directory + "/Asia/Tokyo"))
        try tzif.write(to: URL(fileURLWithPath: dir.file("Area/Sub_Zone/Mixed_Case")))
        try tzif.write(to: URL(fileURLWithPath: dir.file("UTC")))
        let db = ZoneDatabase(directory: dir.path)
        guard case .zone(let rules) = db.zone(named: "area/sub_zone/mixed_case") else {
            Issue.record("area/sub_zone/mixed_case not found in \(dir.path)")
            return
        }
        #expect(rules.name == "Area/Sub_Zone/Mixed_Case")
        #expect(rules.offset(atUTC: 0) == 9 * 3600)
        #expect(db.zone(named: "area/sub_zone") == .unknown, "a directory is no zone")
    }
}
