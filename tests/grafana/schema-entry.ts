// The types the dashboards are checked against, from the pinned @grafana/schema:
// Grafana's dashboard model, and the options (and custom field config, where the
// plugin has one) of each panel plugin the dashboards use. generate-schema.mjs
// turns every interface exported here into a definition of
// schema/grafana.schema.json; the tests look panel plugins up as
// <Plugin>Options and <Plugin>FieldConfig (`state-timeline` -> Statetimeline).
// A dashboard using another plugin fails until it is added here.
import type { Dashboard } from "./node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen";
import type {
  Options as BargaugeOptionsType,
} from "./node_modules/@grafana/schema/dist/types/raw/composable/bargauge/panelcfg/x/types.gen";
import type {
  Options as StatOptionsType,
} from "./node_modules/@grafana/schema/dist/types/raw/composable/stat/panelcfg/x/types.gen";
import type {
  Options as StatetimelineOptionsType,
  FieldConfig as StatetimelineFieldConfigType,
} from "./node_modules/@grafana/schema/dist/types/raw/composable/statetimeline/panelcfg/x/types.gen";
import type {
  Options as TableOptionsType,
  FieldConfig as TableFieldConfigType,
} from "./node_modules/@grafana/schema/dist/types/raw/composable/table/panelcfg/x/types.gen";
import type {
  Options as TimeseriesOptionsType,
  FieldConfig as TimeseriesFieldConfigType,
} from "./node_modules/@grafana/schema/dist/types/raw/composable/timeseries/panelcfg/x/types.gen";

// Each gets its own name: the plugins' types are all called Options and FieldConfig.
export interface GrafanaDashboard extends Dashboard {}
export interface BargaugeOptions extends BargaugeOptionsType {}
export interface StatOptions extends StatOptionsType {}
export interface StatetimelineOptions extends StatetimelineOptionsType {}
export interface StatetimelineFieldConfig extends StatetimelineFieldConfigType {}
export interface TableOptions extends TableOptionsType {}
export interface TableFieldConfig extends TableFieldConfigType {}
export interface TimeseriesOptions extends TimeseriesOptionsType {}
export interface TimeseriesFieldConfig extends TimeseriesFieldConfigType {}
