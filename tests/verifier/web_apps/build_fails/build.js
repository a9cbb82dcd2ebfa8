// The build needs a module the project does not have.
require("./missing");
