-- What render-input's scratch store quarantined (memkiln.io.render_large), in line order.
select reason, detail from quarantine order by line_no
