import Foundation
import Testing
import CampaignFuzzTargets

/// Every seed and every input a fuzzer once failed on (Tests/Corpus/fuzz/TARGET/)
/// goes through its target again: a target stops the process on a broken
/// invariant, so reaching the expectations means each input passed.
@Suite struct CorpusReplayTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Corpus/fuzz")

    @Test(arguments: FuzzTarget.allCases)
    func everyCorpusInputPasses(target: FuzzTarget) throws {
        let folder = Self.corpus.appendingPathComponent(target.rawValue)
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
        #expect(names.count >= 1, "no corpus for \(target)")
        for name in names {
            let bytes = try [UInt8](Data(contentsOf: folder.appendingPathComponent(name)))
            target.run(bytes)
        }
    }
}
