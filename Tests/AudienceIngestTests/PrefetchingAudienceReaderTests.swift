import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
@testable import AudienceIngest

@Suite struct PrefetchingAudienceReaderTests {
    static let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("samples")

    /// Every record of `reader` as text: the values present, by column name.
    /// (Prefetching may show a column a little earlier than the wrapped
    /// reader does; a row without it has no value there either way.)
    static func transcript(_ reader: AudienceReader) -> [String] {
        var row = AudienceRow()
        var out: [String] = []
        do {
            while let record = try reader.next(into: &row) {
                switch record {
                case .row:
                    let values = reader.schema.names.enumerated().compactMap { c in row.string(c.offset).map { "\(c.element)=\($0)" } }
                    out.append("\(row.line) \(values.joined(separator: " "))")
                case .malformed(let line, let reason, let token):
                    out.append("\(line) malformed \(reason) \(token ?? "-")")
                }
            }
            out.append("end")
        } catch {
            out.append("error \(error)")
        }
        return out
    }

    @Test(arguments: ["audience.csv", "audience.ndjson"], [1, 3, 512])
    func givesExactlyWhatTheWrappedReaderGives(sample: String, batchRows: Int) throws {
        let path = Self.samples.appendingPathComponent(sample).path
        let direct = Self.transcript(try AudienceFile.open(path))
        let prefetched = Self.transcript(PrefetchingAudienceReader(try AudienceFile.open(path), batchRows: batchRows, batches: 2))
        #expect(direct.count > 500)
        #expect(prefetched == direct)
    }

    /// NDJSON keys first seen late grow the schema mid-batch; a read error
    /// comes after every row read before it.
    @Test func schemaGrowthAndErrorsKeepTheirPlace() throws {
        let dir = TemporaryDirectory()
        var text = ""
        for i in 0..<100 { text += "{\"token\":\"\(i)\"\(i == 57 ? ",\"late\":\"yes\"" : "")}\n" }
        let gz = GzipCompressor().compress(Array(text.utf8), finish: true)
        try Data(gz.prefix(gz.count - 12)).write(to: URL(fileURLWithPath: dir.file("cut.ndjson.gz")))
        try Data(gz).write(to: URL(fileURLWithPath: dir.file("whole.ndjson.gz")))
        for name in ["cut.ndjson.gz", "whole.ndjson.gz"] {
            let direct = Self.transcript(try AudienceFile.open(dir.file(name)))
            let prefetched = Self.transcript(PrefetchingAudienceReader(try AudienceFile.open(dir.file(name)), batchRows: 8, batches: 2))
            #expect(prefetched == direct, "\(name)")
        }
        #expect(Self.transcript(try AudienceFile.open(dir.file("cut.ndjson.gz"))).last?.hasPrefix("error") == true)
    }

    /// A caller that stops after a few rows drops the reader; its thread ends.
    @Test func aReaderDroppedEarlyStopsItsThread() throws {
        let path = Self.samples.appendingPathComponent("audience.csv").path
        weak var dropped: PrefetchingAudienceReader?
        do {
            let reader = PrefetchingAudienceReader(try AudienceFile.open(path), batchRows: 16, batches: 2)
            dropped = reader
            var row = AudienceRow()
            for _ in 0..<5 { _ = try reader.next(into: &row) }
        }
        #expect(dropped == nil)
    }
}
