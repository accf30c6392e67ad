import Foundation
import Testing
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
@testable import CampaignPlan
@testable import PlanStream
import CampaignRules

/// A job with variants planned: each record names its variant, the holdout's
/// devices go to the holdout file, and a device's variant is the same in a
/// re-plan and in parts.
@Suite(.ownThreads) struct VariantPlanTests {
    static let job = #"""
    {"campaign":"spring-ab","fallback":["en"],"variants":[
      {"name":"A","weight":45,"messages":{"en":{"alert":"A: hi {first_name}"},"es":{"alert":"A: hola {first_name}"}}},
      {"name":"B","weight":45,"messages":{"en":{"alert":"B: picks for {first_name}"}}},
      {"name":"control","weight":10,"holdout":true}]}
    """#

    struct Run {
        var records: [PlanRecord]
        var summary: PlanSummary
        var holdout: [JSONValue]
        var holdoutMode: mode_t
        var header: PlanHeader
    }

    /// Plans `rows` rows (and a bad and a duplicate one) into `parts` plans.
    static func plan(rows: Int, parts: Int = 1, in dir: TemporaryDirectory, name: String) throws -> Run {
        var csv = "token,lang,first_name\n"
        for i in 0..<rows { csv += "\(PlanPartsTests.token(i)),\(i % 3 == 0 ? "es" : "en"),Ann \(i)\n" }
        csv += "nothex,en,Bad\n\(PlanPartsTests.token(5)),en,Dup\n"
        let audience = dir.file("\(name).csv")
        try csv.write(toFile: audience, atomically: true, encoding: .utf8)
        let job = try CampaignJob(json: JSONValue.parse(Self.job), path: "job.json")
        var options = PlanOptions(now: 1_700_000_000)
        options.shards = 16
        options.parts = parts
        options.campaignHash = "0123456789abcdef"
        let planner = try Planner(job: job, options: options)
        let paths = (0..<parts).map { dir.file("\(name)-\($0).plan") }
        let holdout = try HoldoutWriter(path: dir.file("\(name).holdout.ndjson"))
        let summary = try planner.run(reader: AudienceFile.open(audience), plans: paths.map { try PlanWriter(path: $0) },
                                      rejects: RejectsWriter(path: dir.file("\(name).rejects.ndjson")), holdout: holdout)
        var records: [PlanRecord] = []
        var header: PlanHeader?
        for path in paths {
            let reader = try PlanReader(path: path)
            header = reader.header
            while let r = try reader.next() { records.append(r) }
        }
        let lines = try String(contentsOfFile: holdout.path, encoding: .utf8).split(separator: "\n")
        var info = stat()
        stat(holdout.path, &info)
        return Run(records: records, summary: summary, holdout: try lines.map { try JSONValue.parse(Array($0.utf8)) },
                   holdoutMode: info.st_mode & 0o777, header: header!)
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test func everyDeviceIsInTheVariantOfItsTokenInARePlanAndInParts() throws {
        let dir = TemporaryDirectory("variants")
        let first = try Self.plan(rows: 4_000, in: dir, name: "first")
        let again = try Self.plan(rows: 4_000, in: dir, name: "again")
        let parted = try Self.plan(rows: 4_000, parts: 4, in: dir, name: "parts")
        let assigner = VariantAssigner(campaign: "spring-ab", weights: [45, 45, 10])
        let names = ["A", "B", "control"]
        func variants(_ run: Run) -> [String: String] {
            var map: [String: String] = [:]
            for r in run.records { map[Self.hex(r.token)] = r.variant }
            for h in run.holdout { map[h["token"]!.stringValue!] = h["variant"]!.stringValue! }
            return map
        }
        let map = variants(first)
        #expect(map.count == 4_000)
        for r in first.records {
            #expect(r.variant == names[assigner.variant(of: r.token)])
            #expect(r.payload.starts(with: Array(#"{"aps":{"alert":"\#(r.variant!):"#.utf8)), "each variant's own message")
        }
        #expect(variants(again) == map, "a re-plan")
        #expect(variants(parted) == map, "--parts 4")
        #expect(first.header.variants == [PlanVariant(name: "A", weight: 45), PlanVariant(name: "B", weight: 45),
                                          PlanVariant(name: "control", weight: 10, holdout: true)])
        #expect(parted.header.variants == first.header.variants)
    }

    @Test func theHoldoutIsWrittenBesideTheRejectsAndCountedApart() throws {
        let dir = TemporaryDirectory("variants")
        let run = try Self.plan(rows: 3_000, in: dir, name: "plan")
        let s = run.summary
        #expect(s.rowsRead == 3_002)
        #expect(s.rejectedTotal == 2, "a holdout is no reject (and no part of --max-reject-rate)")
        #expect(s.planned + s.heldOut + s.rejectedTotal == s.rowsRead)
        #expect(s.perVariant.map(\.name) == ["A", "B", "control"])
        #expect(s.perVariant.filter { !$0.holdout }.reduce(0) { $0 + $1.count } == s.planned)
        #expect(s.heldOut == run.holdout.count && s.heldOut > 200 && s.heldOut < 400)
        #expect(run.records.count == s.planned)
        #expect(run.holdoutMode == 0o600)
        let first = try #require(run.holdout.first)
        #expect(first["variant"] == .string("control"))
        let line = try #require(first["line"]?.integerValue)
        #expect(first["row"]?["token"] == first["token"], "the row's columns")
        #expect(first["row"]?["first_name"] == .string("Ann \(line - 2)"))
        let planned = Set(run.records.map { Self.hex($0.token) })
        #expect(run.holdout.allSatisfy { !planned.contains($0["token"]!.stringValue!) })
        let json = s.json
        #expect(json["held_out"]?.integerValue == Int64(s.heldOut))
        #expect(json["per_variant"]?["A"]?["planned"]?.integerValue == Int64(s.perVariant[0].count))
        #expect(json["per_variant"]?["control"]?["held_out"]?.integerValue == Int64(s.heldOut))
        #expect(s.text.contains("variants: A \(s.perVariant[0].count) planned, B \(s.perVariant[1].count) planned, control \(s.heldOut) held out"))
    }

    @Test func aReaderRefusesARecordOfNoVariantOfAnUnknownOneOrOfTheHoldout() throws {
        let dir = TemporaryDirectory("variants")
        let run = try Self.plan(rows: 50, in: dir, name: "plan")
        let text = try String(contentsOfFile: dir.file("plan-0.plan"), encoding: .utf8)
        #expect(text.contains(#","variant":"A","payload":"#) || text.contains(#","variant":"B","payload":"#))
        #expect(run.records.allSatisfy { $0.variant == "A" || $0.variant == "B" })
        let lines = text.split(separator: "\n").map(String.init)
        for (change, words) in [(#","variant":"C""#, #"variant "C" is not one of the header's variants"#),
                                (#","variant":"control""#, #"variant "control" is a holdout"#),
                                ("", #"no "variant" in a plan with variants"#)] {
            var edited = lines
            edited[1] = edited[1].replacingOccurrences(of: #","variant":"A""#, with: change).replacingOccurrences(of: #","variant":"B""#, with: change)
            let path = dir.file("edited.plan")
            try (edited.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            let reader = try PlanReader(path: path)
            do { _ = try reader.next(); Issue.record("accepted: \(change)") } catch {
                #expect("\(error)".contains(words), "\(error)")
            }
        }
    }

    @Test func aPlanWithoutVariantsHasNoVariantField() throws {
        let run = try PlanPartsTests.plan(rows: 200, parts: 1)
        let text = try String(contentsOfFile: run.dir.file("whole.plan"), encoding: .utf8)
        #expect(!text.contains("variant"))
        #expect(run.whole.allSatisfy { $0.variant == nil })
        #expect(run.summary.json["per_variant"] == nil && !run.summary.text.contains("variants"))
    }
}
