import Testing
@testable import CampaignCommands

/// The page's line charts draw what they are given, however little.
@Suite struct StatusPageChartTests {
    /// A round trip measured in one second only (a wave sent in a run's
    /// last, partial second) is a dot, with its value on the axis.
    @Test func aSeriesOfOnePointIsADotLabelledWithItsValue() {
        let svg = StatusPage.lineChart([("#123456", [(x: 20, y: 6.7)])], emptyText: "none")
        #expect(svg.contains("<circle") && svg.contains("fill=\"#123456\"") && !svg.contains("<polyline"), "\(svg)")
        #expect(svg.contains(">6.7</text>"), "\(svg)")
    }

    @Test func aSeriesOfSeveralPointsIsALine() {
        let svg = StatusPage.lineChart([("#123456", [(x: 1, y: 100), (x: 2, y: 250)])], emptyText: "none")
        #expect(svg.contains("<polyline") && !svg.contains("<circle") && svg.contains(">250</text>"), "\(svg)")
    }
}
