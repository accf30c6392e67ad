import Foundation
import Testing
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
@testable import CampaignPlan
@testable import PlanStream

/// A database export as it comes: other column names, empty and null
/// fields, numbers and booleans, nested keys, languages without a message.
/// The README's example job (`jobs/real-export.json`) plans it without
/// losing a recipient.
@Suite struct RealExportTests {
    static let jobText: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return try! String(contentsOf: root.appendingPathComponent("jobs/real-export.json"), encoding: .utf8)
    }()

    /// Row n: its language, first name (empty every third), order id, VIP flag, points.
    static func row(_ n: Int) -> (locale: String, name: String, order: Int, vip: Bool, points: String) {
        let locales = ["en-US", "pt-BR", "ca", "de-DE", "gl", "fr-FR", "es-MX"]
        return (locales[n % locales.count], n % 3 == 0 ? "" : "N\(n)", 1000 + n, n % 2 == 0, "\(n).5")
    }

    static let rows = 42

    static var csv: String {
        (["device_token,locale,fname,order.id,is_vip,loyalty_points"] + (1...rows).map { n in
            let r = row(n)
            return "\(tokenHex(n)),\(r.locale),\(r.name),\(r.order),\(r.vip),\(r.points)"
        }).joined(separator: "\n")
    }

    static var ndjson: String {
        (1...rows).map { n in
            let r = row(n)
            let name = r.name.isEmpty ? (n % 2 == 0 ? "null" : "\"\"") : "\"\(r.name)\""
            return #"{"device_token":"\#(tokenHex(n))","locale":"\#(r.locale)","fname":\#(name),"order":{"id":\#(r.order)},"is_vip":\#(r.vip),"loyalty_points":\#(r.points)}"#
        }.joined(separator: "\n")
    }

    @Test(arguments: ["audience.csv", "audience.ndjson"])
    func theExampleJobPlansAnExportWithOtherNamesAndEmptyFields(name: String) throws {
        let run = try PlanRun(job: Self.jobText, audience: name.hasSuffix("csv") ? Self.csv : Self.ndjson, name: name)
        #expect(run.summary.rejectedTotal == 0, "\(run.rejects.prefix(3))")
        #expect(run.records.count == Self.rows)
        #expect(run.summary.defaulted["first_name"] == Self.rows / 3)
        #expect(run.reader.header.http2?.topic == "com.example.campaign")
        for record in run.records {
            let n = (1...Self.rows).first { tokenHex($0) == record.token.map { String(format: "%02x", $0) }.joined() }!
            let r = Self.row(n)
            let payload = try JSONValue.parse(record.payload)
            #expect(payload["order_id"] == .number(String(r.order)), "typed: a JSON number")
            #expect(payload["vip"] == .bool(r.vip), "typed: a JSON boolean")
            #expect(payload["points"] == .number(r.points))
            #expect(payload["sent_at"] == .number("1700000000"))
            // pt-BR, ca and gl fall to Spanish; fr to English; de and es have their own.
            let expected = ["pt-BR": "es", "ca": "es", "gl": "es", "fr-FR": "en", "en-US": "en", "de-DE": "de", "es-MX": "es"][r.locale]!
            #expect(record.lang == expected, "\(r.locale)")
            let body = payload["aps"]?["alert"]?["body"]?.stringValue ?? ""
            let greeting = ["en": "Hi there,", "es": "¡Hola amigo!", "de": "Hallo zusammen,"][expected]!
            #expect(r.name.isEmpty ? body.hasPrefix(greeting) : body.contains(r.name), "\(body)")
        }
    }

    @Test func aColumnOnTheCommandLineOverridesTheJobs() throws {
        let csv = Self.csv.replacingOccurrences(of: "fname", with: "given_name")
        let run = try PlanRun(job: Self.jobText, audience: csv, columns: ColumnMapping(["first_name": "given_name"]))
        #expect(run.summary.rejectedTotal == 0 && run.summary.defaulted["first_name"] == Self.rows / 3)
        #expect {
            try PlanRun(job: Self.jobText, audience: csv, columns: ColumnMapping(["frist_name": "given_name"]))
        } throws: {
            guard let e = $0 as? JobError, case .unmappedName("frist_name", _) = e.reason else { return false }
            return true
        }
    }

    @Test func aMappedTokenColumnThatIsNotThereIsNamed() throws {
        let csv = Self.csv.replacingOccurrences(of: "device_token", with: "push_id")
        #expect { try PlanRun(job: Self.jobText, audience: csv) } throws: {
            "\($0)".contains("no column \"device_token\"") && "\($0)".contains("push_id")
        }
    }

    @Test func anNDJSONExportWithoutATokenKeyStopsAtOnceNamingItsKeys() throws {
        let rows = (1...1500).map { #"{"push_id":"\#(tokenHex($0))","locale":"en"}"# }.joined(separator: "\n")
        #expect { try PlanRun(audience: rows, name: "audience.ndjson") } throws: { error in
            let text = "\(error)"
            return error is AudienceError && text.contains("first 1000 rows") && text.contains("push_id, locale") && text.contains("--column token=")
        }
        // Shorter than the search: stopped at its end, not planned as rejects.
        #expect { try PlanRun(audience: #"{"push_id":"ab"}"#, name: "audience.ndjson") } throws: { "\($0)".contains("first 1 rows") }
        // A mapped name is looked for instead.
        let run = try PlanRun(job: #"{"campaign":"c","messages":{"en":{"alert":"x"}}}"#, audience: rows, name: "audience.ndjson",
                              columns: ColumnMapping(["token": "push_id"]))
        #expect(run.summary.planned + (run.summary.rejected[.duplicateToken] ?? 0) == 1500 && run.summary.planned > 0)
    }

    @Test func aQuotedHeaderSeparatedBySemicolonsGetsTheDelimiterHint() throws {
        let csv = "\"token\";\"lang\"\n\"\(tokenHex(1))\";\"en\"\n"
        #expect { try PlanRun(audience: csv) } throws: { "\($0)".contains("give --delimiter ';'") }
    }
}
